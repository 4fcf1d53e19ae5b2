//! The resolver's answer cache in the kernel (`bpf/cache.h`): [`KernelCache`] places, writes
//! and deletes entries of the set-associative `xdns_cache_idx` + `xdns_cache_{s,m,l}` arrays,
//! through mmap (it implements
//! [`xdns_wire::AnswerCache`]), [`PrefetchEvents`] reads the refresh requests XDP sends through
//! the `xdns_cache_events` ring buffer, and [`allow_key`] builds keys of the `xdns_allow` trie.
//!
//! Neither holds the skeleton: `KernelCache` holds mappings of the arrays, `PrefetchEvents` a
//! duplicated map fd. Both are `Send + Sync` and keep their maps alive on their own.

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use xdns_wire::{AnswerCache, CacheKey, CachedAnswer};

use crate::data::csum16;
use crate::hash::name_hash;
use crate::maps::bytes_of;
use crate::types::{
    xdns_allow_key, xdns_allow_table, xdns_answer, xdns_body_class, xdns_cache_bucket, xdns_cache_event,
    xdns_cache_key, xdns_cache_l, xdns_cache_m, xdns_cache_meta, xdns_cache_s,
};

/// Records per cached body whose TTLs the kernel rewrites (`XDNS_CACHE_MAX_RRS`), from the
/// generated layout.
pub const MAX_RRS: usize =
    (std::mem::size_of::<xdns_cache_meta>() - std::mem::offset_of!(xdns_cache_meta, ttl_off)) / 2;

/// Values of each size class (array maps, allocated at load: memory is `entries *
/// bytes_per_entry`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheCapacity {
    /// Bodies of at most 128 bytes.
    pub s: u32,
    /// Bodies of at most 512 bytes.
    pub m: u32,
    /// Bodies of at most 1280 bytes.
    pub l: u32,
}

impl Default for CacheCapacity {
    /// 32768 + 8192 + 2048 entries, about 32 MiB of kernel memory (see [`bytes_per_entry`]).
    fn default() -> Self {
        Self { s: 32768, m: 8192, l: 2048 }
    }
}

impl CacheCapacity {
    /// Buckets of the index (`xdns_cache_idx`): twice as many entries as values, rounded up
    /// to a power of two, so a full cache leaves the index at most half full.
    pub fn buckets(&self) -> u32 {
        let vals = u64::from(self.s) + u64::from(self.m) + u64::from(self.l);
        let entries = (2 * vals).next_power_of_two().max(64);
        (entries / WAYS as u64).min(1 << 28) as u32
    }
}

/// Kernel memory of one cached answer in each class: the value rounded to 8, and its share of
/// the index (two entries of 16 bytes).
pub fn bytes_per_entry() -> [(&'static str, usize); 3] {
    let r8 = |n: usize| n.div_ceil(8) * 8;
    let idx = 2 * ENTRY;
    [
        ("cache S", idx + r8(std::mem::size_of::<xdns_cache_s>())),
        ("cache M", idx + r8(std::mem::size_of::<xdns_cache_m>())),
        ("cache L", idx + r8(std::mem::size_of::<xdns_cache_l>())),
    ]
}

/// A cache value in the map of its size class.
#[derive(Clone)]
pub enum CacheValue {
    S(Box<xdns_cache_s>),
    M(Box<xdns_cache_m>),
    L(Box<xdns_cache_l>),
}

impl CacheValue {
    /// Index of the map (0 = S, 1 = M, 2 = L).
    pub fn class(&self) -> usize {
        match self {
            CacheValue::S(_) => 0,
            CacheValue::M(_) => 1,
            CacheValue::L(_) => 2,
        }
    }

    fn bytes(&self) -> &[u8] {
        match self {
            CacheValue::S(v) => bytes_of(&**v),
            CacheValue::M(v) => bytes_of(&**v),
            CacheValue::L(v) => bytes_of(&**v),
        }
    }
}

/// A tag no other write of this process used (never 0): see `struct xdns_cache_meta`.
fn next_tag() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Lowercase (A-Z only, like the kernel) a valid uncompressed wire name, `None` if invalid.
fn lower_name(name: &[u8]) -> Option<Vec<u8>> {
    if !xdns_wire::name::is_valid(name) || name.len() > 255 {
        return None;
    }
    Some(name.to_ascii_lowercase())
}

/// The map key of `(qname, qtype, DO)` for hash seed `seed`; `None` if `qname` is not a valid
/// wire name.
pub fn cache_key(seed: u64, qname: &[u8], qtype: u16, dnssec_ok: bool) -> Option<xdns_cache_key> {
    let name = lower_name(qname)?;
    Some(xdns_cache_key {
        hash: name_hash(seed, &name),
        qtype,
        do_bit: u8::from(dnssec_ok),
        name_len: name.len() as u8,
        _pad: 0,
    })
}

/// Why an answer is left to userspace instead of the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotCached {
    /// The question name is not a valid wire name.
    BadName,
    /// The body was not compiled against the question name (`base_len` differs).
    BaseMismatch,
    /// Larger than the largest class (1280 bytes).
    TooLarge,
    /// More records than [`MAX_RRS`].
    TooManyRecords,
    /// The records cannot be walked.
    Malformed,
}

/// The key and value of `answer` (seed `seed`), or why the kernel cannot hold it.
pub fn encode_entry(seed: u64, answer: &CachedAnswer) -> Result<(xdns_cache_key, CacheValue), NotCached> {
    let name = lower_name(&answer.qname).ok_or(NotCached::BadName)?;
    let body = &answer.body;
    if usize::from(body.base_len) != name.len() {
        return Err(NotCached::BaseMismatch);
    }
    let n = body.bytes.len();
    if n > crate::data::CLASS_L_LEN {
        return Err(NotCached::TooLarge);
    }
    let ttls = xdns_wire::cache::ttl_offsets(body).ok_or(NotCached::Malformed)?;
    if ttls.len() > MAX_RRS {
        return Err(NotCached::TooManyRecords);
    }
    let key = cache_key(seed, &name, answer.qtype, answer.dnssec_ok).ok_or(NotCached::BadName)?;
    let an_ns = usize::from(body.an_ns_len).min(n);
    let tag = next_tag();
    let mut meta = xdns_cache_meta {
        tag,
        stored_ns: answer.stored_at_ns,
        expires_ns: answer.expires_at_ns,
        prefetch_ns: answer.prefetch_at_ns,
        prefetch_sent: 0,
        ans: xdns_answer {
            flags: body.flags & 0x000F,
            ancount: body.ancount,
            nscount: body.nscount,
            arcount: body.arcount,
            len: n as u16,
            an_ns_len: an_ns as u16,
            base_len: name.len() as u16,
            csum: csum16(&body.bytes),
            csum_an_ns: csum16(&body.bytes[..an_ns]),
            nfixups: 0, // compiled against the question name: delta is always 0
            ar_required: u8::from(body.ar_required),
            class: 0,
            dnssec: 0,
            body_ver: 0,
        },
        nttl: ttls.len() as u16,
        qtype: key.qtype,
        do_bit: key.do_bit,
        ..Default::default()
    };
    meta.name[..name.len()].copy_from_slice(&name);
    meta.ttl_off[..ttls.len()].copy_from_slice(&ttls);
    let value = if n <= crate::data::CLASS_S_LEN {
        meta.ans.class = xdns_body_class::XDNS_CLASS_S.0 as u8;
        let mut v = Box::new(xdns_cache_s { m: meta, tag_end: tag, ..Default::default() });
        v.bytes[..n].copy_from_slice(&body.bytes);
        CacheValue::S(v)
    } else if n <= crate::data::CLASS_M_LEN {
        meta.ans.class = xdns_body_class::XDNS_CLASS_M.0 as u8;
        let mut v = Box::new(xdns_cache_m { m: meta, tag_end: tag, ..Default::default() });
        v.bytes[..n].copy_from_slice(&body.bytes);
        CacheValue::M(v)
    } else {
        meta.ans.class = xdns_body_class::XDNS_CLASS_L.0 as u8;
        let mut v = Box::new(xdns_cache_l { m: meta, tag_end: tag, ..Default::default() });
        v.bytes[..n].copy_from_slice(&body.bytes);
        CacheValue::L(v)
    };
    Ok((key, value))
}

/// One array map's values, mapped into this process (`BPF_F_MMAPABLE`): `count` values of
/// `stride` bytes (the value size rounded up to 8, as the kernel lays them out).
struct Mapped {
    ptr: *mut u8,
    len: usize,
    stride: usize,
    count: u32,
}

// SAFETY: the mapping is plain shared memory owned by this value; every write to it goes
// through `KernelCache`, under its mutex.
unsafe impl Send for Mapped {}
// SAFETY: as above; shared references only read it (names, for `remove_names`).
unsafe impl Sync for Mapped {}

impl Mapped {
    fn new(fd: BorrowedFd<'_>, value_size: usize) -> Result<Self, String> {
        let mut info = libbpf_sys::bpf_map_info::default();
        let mut len = std::mem::size_of::<libbpf_sys::bpf_map_info>() as u32;
        // SAFETY: `fd` is a map fd; `info` is valid for writes of `len` bytes.
        let rc = unsafe { libbpf_sys::bpf_obj_get_info_by_fd(fd.as_raw_fd(), (&mut info as *mut libbpf_sys::bpf_map_info).cast(), &mut len) };
        errno_result(rc, "reading a cache map's size")?;
        let stride = value_size.div_ceil(8) * 8;
        if info.value_size as usize != value_size {
            return Err(format!("cache map value size {} != {value_size}", info.value_size));
        }
        let bytes = stride * info.max_entries as usize;
        // SAFETY: mapping a BPF_F_MMAPABLE array map fd shared, at offset 0, no longer than its
        // values (the kernel rounds the area up to a page and refuses a longer mapping).
        let ptr = unsafe {
            libc::mmap(std::ptr::null_mut(), bytes, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd.as_raw_fd(), 0)
        };
        if ptr == libc::MAP_FAILED {
            return Err(format!("mapping a cache map: {}", std::io::Error::last_os_error()));
        }
        Ok(Self { ptr: ptr.cast(), len: bytes, stride, count: info.max_entries })
    }

    /// Address of value `i` (< count).
    fn at(&self, i: u32) -> *mut u8 {
        assert!(i < self.count);
        // SAFETY: in bounds: i < count and the mapping holds count * stride bytes.
        unsafe { self.ptr.add(i as usize * self.stride) }
    }

    fn u64_at(&self, i: u32, off: usize) -> &AtomicU64 {
        assert!(off.is_multiple_of(8) && off + 8 <= self.stride);
        // SAFETY: aligned (values start at multiples of 8 in a page-aligned mapping), in bounds,
        // and the memory lives as long as `self`.
        unsafe { &*(self.at(i).add(off) as *const AtomicU64) }
    }

    fn u32_at(&self, i: u32, off: usize) -> &AtomicU32 {
        assert!(off.is_multiple_of(4) && off + 4 <= self.stride);
        // SAFETY: as in `u64_at`.
        unsafe { &*(self.at(i).add(off) as *const AtomicU32) }
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what `new` mapped; no reference into it outlives `self`.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// A key as the index holds it: (hash, XDNS_CACHE_META).
type Id = (u64, u32);

fn key_id(k: &xdns_cache_key) -> Id {
    let meta = u32::from(k.qtype) | u32::from(k.do_bit & 1) << 16 | u32::from(k.name_len) << 17 | 1 << 25;
    (k.hash, meta)
}

fn cache_pos(k: &xdns_cache_key) -> u32 {
    crate::hash::cache_pos(k.hash, k.qtype, k.do_bit & 1 != 0)
}

/// Where an entry sits.
#[derive(Clone, Copy)]
struct Placed {
    class: usize,
    slot: u32,
    bucket: u32,
    way: usize,
    expires: u64,
}

/// The resolver's view of the kernel cache: what sits where, what is free.
struct State {
    placed: HashMap<Id, Placed>,
    /// The index as written: each bucket's keys, `None` where a way is free.
    ways: Vec<[Option<Id>; WAYS]>,
    free: [Vec<u32>; 3],
    /// Per class, entries by expiry: a full class makes room by its soonest expiring entry.
    by_expiry: [BTreeSet<(u64, Id)>; 3],
}

const BUCKET: usize = std::mem::size_of::<xdns_cache_bucket>();
const ENTRY: usize = std::mem::size_of::<crate::types::xdns_table_entry>();
/// Entries per bucket (`XDNS_CACHE_WAYS`).
const WAYS: usize = BUCKET / ENTRY;
/// Slot bits of an entry's `ref` (`XDNS_CACHE_SLOT`); the size class is above them.
const SLOT: u32 = 0x3fff_ffff;

struct Inner {
    seed: u64,
    idx: Mapped,
    /// `xdns_cache_s`, `_m`, `_l`.
    vals: [Mapped; 3],
    /// Offset of `tag_end` in each class's value.
    tag_end: [usize; 3],
    state: Mutex<State>,
    /// Entries given up to make room (a full bucket or a full class).
    evictions: AtomicU64,
}

/// The kernel answer cache: writes the array maps of a loaded program through mmap (see
/// `bpf/xdns_abi.h`). Cheap to clone, `Send + Sync`; every clone shares the placement state,
/// so a program has one (`XdpProgram::cache`). Keeps the maps alive (not the program).
///
/// Set-associative: a key may sit in the XDNS_CACHE_WAYS entries of its bucket and in any free
/// slot of its size class. When both have room nothing is evicted; otherwise the entry that
/// expires soonest (of the bucket, or of the class) makes room. The program never sees a value
/// half written: values are rewritten under a sequence lock (`tag`, `tag_end`), index entries
/// are unpublished before they change, and a value carries its whole key.
///
/// [`AnswerCache::insert`] of an answer the kernel cannot hold ([`NotCached`]) removes any older
/// entry for its key and returns `Ok`: userspace answers it.
#[derive(Clone)]
pub struct KernelCache {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for KernelCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KernelCache").finish_non_exhaustive()
    }
}

fn errno_result(rc: i32, what: &str) -> Result<(), String> {
    if rc == 0 {
        Ok(())
    } else {
        Err(format!("{what}: {}", std::io::Error::from_raw_os_error(-rc)))
    }
}

impl KernelCache {
    /// Over the index and the three value maps (S, M, L) of a program loaded with hash seed
    /// `seed`; the index's size must be the program's `cache_mask + 1` buckets.
    pub fn new(seed: u64, idx: BorrowedFd<'_>, vals: [BorrowedFd<'_>; 3]) -> Result<Self, String> {
        let idx = Mapped::new(idx, BUCKET)?;
        if !idx.count.is_power_of_two() {
            return Err(format!("cache index of {} buckets: not a power of two", idx.count));
        }
        let vals = [
            Mapped::new(vals[0], std::mem::size_of::<xdns_cache_s>())?,
            Mapped::new(vals[1], std::mem::size_of::<xdns_cache_m>())?,
            Mapped::new(vals[2], std::mem::size_of::<xdns_cache_l>())?,
        ];
        let free = [0, 1, 2].map(|c| (0..vals[c].count).rev().collect::<Vec<u32>>());
        let state = State {
            placed: HashMap::new(),
            ways: vec![[None; WAYS]; idx.count as usize],
            free,
            by_expiry: Default::default(),
        };
        let tag_end = [
            std::mem::offset_of!(xdns_cache_s, tag_end),
            std::mem::offset_of!(xdns_cache_m, tag_end),
            std::mem::offset_of!(xdns_cache_l, tag_end),
        ];
        let inner = Inner { seed, idx, vals, tag_end, state: Mutex::new(state), evictions: AtomicU64::new(0) };
        // The kernel zeroes new maps: no entry is published, no value is whole (tag 0).
        Ok(Self { inner: Arc::new(inner) })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.inner.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Clear index entry (b, w): hash and meta 0, which matches no key.
    fn unpublish(&self, b: u32, w: usize) {
        let idx = &self.inner.idx;
        idx.u64_at(b, w * ENTRY).store(0, Ordering::Release);
        idx.u32_at(b, w * ENTRY + 8).store(0, Ordering::Release);
    }

    /// Point index entry (b, w) at `(class, slot)` for key `id`. The hash goes last: until
    /// then the entry matches no key (it was unpublished), and a reader that sees a mix of
    /// old and new fields finds a value whose key differs, a miss.
    fn publish(&self, b: u32, w: usize, id: Id, class: usize, slot: u32) {
        let idx = &self.inner.idx;
        let r = (class as u32) << 30 | (slot & SLOT);
        idx.u32_at(b, w * ENTRY + 12).store(r, Ordering::Relaxed);
        idx.u32_at(b, w * ENTRY + 8).store(id.1, Ordering::Relaxed);
        fence(Ordering::Release);
        idx.u64_at(b, w * ENTRY).store(id.0, Ordering::Release);
    }

    /// Write `value` (a whole value of `class`, `tag` first and `tag_end` last) into `slot`
    /// under the sequence lock: tag 0, the bytes between, tag_end, then tag. With `raw`, the
    /// bytes are written as they are, tags included (tests stage torn values so).
    fn write_value(&self, class: usize, slot: u32, value: &[u8], raw: bool) {
        let m = &self.inner.vals[class];
        let end = self.inner.tag_end[class];
        assert_eq!(value.len(), end + 8);
        let tag = u64::from_ne_bytes(value[..8].try_into().expect("8 bytes"));
        let tag_end = u64::from_ne_bytes(value[end..].try_into().expect("8 bytes"));
        m.u64_at(slot, 0).store(0, Ordering::Relaxed);
        fence(Ordering::Release);
        // SAFETY: bytes 8..end of the slot's value, in bounds (value.len() = end + 8 <= stride);
        // the program only reads them (and the tags tell it whether they were whole), the one
        // word it writes (prefetch_sent) is a flag this write may reset.
        unsafe { std::ptr::copy_nonoverlapping(value[8..end].as_ptr(), m.at(slot).add(8), end - 8) };
        m.u64_at(slot, end).store(tag_end, Ordering::Relaxed);
        fence(Ordering::Release);
        m.u64_at(slot, 0).store(if raw { tag } else { tag_end }, Ordering::Release);
    }

    /// Forget `id`: unpublish its index entry, spoil its value's tags, free its slot. Both
    /// tags: a reader holding the slot from a hint (`bpf/memo.h`), not from the index, sees
    /// `tag_end` 0 and counts a miss.
    fn drop_entry(&self, st: &mut State, id: Id) -> bool {
        let Some(p) = st.placed.remove(&id) else {
            return false;
        };
        self.unpublish(p.bucket, p.way);
        st.ways[p.bucket as usize][p.way] = None;
        let vals = &self.inner.vals[p.class];
        vals.u64_at(p.slot, 0).store(0, Ordering::Release);
        vals.u64_at(p.slot, self.inner.tag_end[p.class]).store(0, Ordering::Release);
        st.free[p.class].push(p.slot);
        st.by_expiry[p.class].remove(&(p.expires, id));
        true
    }

    /// Place `value` (class `class`) for `key`, evicting what must make room.
    fn place(&self, key: &xdns_cache_key, class: usize, value: &[u8], expires: u64, raw: bool) {
        let id = key_id(key);
        let mut st = self.state();
        let st = &mut *st;
        if let Some(p) = st.placed.get(&id).copied() {
            if p.class == class {
                self.write_value(class, p.slot, value, raw);
                st.by_expiry[class].remove(&(p.expires, id));
                st.by_expiry[class].insert((expires, id));
                st.placed.insert(id, Placed { expires, ..p });
                return;
            }
            self.drop_entry(st, id);
        }
        let b = cache_pos(key) & (self.inner.idx.count - 1);
        let way = match st.ways[b as usize].iter().position(Option::is_none) {
            Some(w) => w,
            None => {
                let (w, victim) = st.ways[b as usize]
                    .iter()
                    .enumerate()
                    .filter_map(|(w, v)| v.map(|v| (w, v)))
                    .min_by_key(|(_, v)| st.placed.get(v).map_or(0, |p| p.expires))
                    .expect("a full bucket");
                self.drop_entry(st, victim);
                self.inner.evictions.fetch_add(1, Ordering::Relaxed);
                w
            }
        };
        if st.free[class].is_empty() {
            let &(_, victim) = st.by_expiry[class].first().expect("a full class has entries");
            self.drop_entry(st, victim);
            self.inner.evictions.fetch_add(1, Ordering::Relaxed);
        }
        let slot = st.free[class].pop().expect("a free slot");
        self.write_value(class, slot, value, raw);
        self.publish(b, way, id, class, slot);
        st.ways[b as usize][way] = Some(id);
        st.placed.insert(id, Placed { class, slot, bucket: b, way, expires });
        st.by_expiry[class].insert((expires, id));
    }

    /// Write raw value bytes for `key` into class `class` (0 = S, 1 = M, 2 = L), tags as
    /// given: tests use it to stage entries the encoder never makes (a torn write: `tag !=
    /// tag_end`).
    #[doc(hidden)]
    pub fn put_raw(&self, class: usize, key: &xdns_cache_key, value: &[u8]) -> Result<(), String> {
        if class > 2 || value.len() != self.inner.tag_end[class] + 8 {
            return Err("no such class, or not one of its values".into());
        }
        self.place(key, class, value, u64::MAX, true);
        Ok(())
    }

    /// Insert, telling why an answer stays in userspace (`Ok(Err(_))`; any old entry removed).
    pub fn try_insert(&self, answer: &CachedAnswer) -> Result<Result<(), NotCached>, String> {
        match encode_entry(self.inner.seed, answer) {
            Ok((key, value)) => {
                self.place(&key, value.class(), value.bytes(), answer.expires_at_ns, false);
                Ok(Ok(()))
            }
            Err(why) => {
                self.remove(&answer.key())?;
                Ok(Err(why))
            }
        }
    }

    /// Entries given up to make room since the start (a full bucket or a full class).
    pub fn evictions(&self) -> u64 {
        self.inner.evictions.load(Ordering::Relaxed)
    }

    /// Entries in each class (S, M, L).
    pub fn entries(&self) -> [usize; 3] {
        let st = self.state();
        [0, 1, 2].map(|c| self.inner.vals[c].count as usize - st.free[c].len())
    }

    /// Deletes the entries whose question name (lowercased wire form) `matches`, every type
    /// and DO bit (`xdns flush NAME`: the kernel may hold answers the userspace cache has
    /// dropped). Returns how many were deleted.
    pub fn remove_names(&self, matches: &dyn Fn(&[u8]) -> bool) -> Result<usize, String> {
        let at = std::mem::offset_of!(xdns_cache_meta, name); // meta leads every class
        let mut st = self.state();
        let st = &mut *st;
        let mut doomed = Vec::new();
        for (id, p) in &st.placed {
            let len = ((id.1 >> 17) & 0xff) as usize;
            // SAFETY: the name bytes of a value we wrote, in bounds (meta leads the value and
            // holds 256 name bytes); only we write them, under the lock we hold.
            let name = unsafe { std::slice::from_raw_parts(self.inner.vals[p.class].at(p.slot).add(at), len) };
            if matches(name) {
                doomed.push(*id);
            }
        }
        for id in &doomed {
            self.drop_entry(st, *id);
        }
        Ok(doomed.len())
    }

    /// Deletes every entry (`xdns flush`: the userspace cache may have dropped answers the
    /// kernel still serves). Returns how many were deleted.
    pub fn clear(&self) -> Result<usize, String> {
        let mut st = self.state();
        let st = &mut *st;
        let all: Vec<Id> = st.placed.keys().copied().collect();
        for id in &all {
            self.drop_entry(st, *id);
        }
        Ok(all.len())
    }

    fn remove_key(&self, k: &xdns_cache_key) {
        let mut st = self.state();
        self.drop_entry(&mut st, key_id(k));
    }
}

impl AnswerCache for KernelCache {
    fn insert(&self, answer: &CachedAnswer) -> Result<(), String> {
        self.try_insert(answer).map(|_| ())
    }

    fn remove(&self, key: &CacheKey) -> Result<(), String> {
        if let Some(k) = cache_key(self.inner.seed, &key.qname, key.qtype, key.dnssec_ok) {
            self.remove_key(&k);
        }
        Ok(())
    }

    fn clear(&self) -> Result<usize, String> {
        KernelCache::clear(self)
    }

    fn remove_names(&self, matches: &dyn Fn(&[u8]) -> bool) -> Result<usize, String> {
        KernelCache::remove_names(self, matches)
    }

    fn stats(&self) -> Vec<(&'static str, u64)> {
        let [s, m, l] = self.entries().map(|n| n as u64);
        vec![
            ("kernel_cache_entries", s + m + l),
            ("kernel_cache_evictions", self.evictions()),
        ]
    }
}

/// The short-list form of the allow list (`xdns_allow_inline`): each trie key as prefix and
/// mask over its 16 address bytes; more than `XDNS_ALLOW_INLINE` prefixes leave the decision
/// to the trie (`n` = the count, above the table's size).
pub fn allow_table(keys: &[xdns_allow_key]) -> Box<xdns_allow_table> {
    let mut t = Box::<xdns_allow_table>::default();
    t.n = keys.len() as u32;
    if keys.len() > t.p.len() {
        return t;
    }
    for (e, k) in t.p.iter_mut().zip(keys) {
        let bits = k.prefixlen.saturating_sub(8).min(128) as usize; // the family byte comes first
        let mut mask = [0u8; 16];
        for (i, m) in mask.iter_mut().enumerate() {
            let left = bits.saturating_sub(i * 8).min(8);
            *m = if left == 0 { 0 } else { 0xffu8 << (8 - left) };
        }
        let half = |b: &[u8; 16], i: usize| u64::from_ne_bytes(b[i * 8..i * 8 + 8].try_into().unwrap());
        let mut addr = k.addr;
        for (a, m) in addr.iter_mut().zip(&mask) {
            *a &= m;
        }
        e.addr = [half(&addr, 0), half(&addr, 1)];
        e.mask = [half(&mask, 0), half(&mask, 1)];
        e.family = k.family;
    }
    t
}

/// The key of the `xdns_allow` trie for prefix `addr/len`: the family byte, then the address
/// (IPv4 in the first 4 bytes), so an IPv4 prefix never matches an IPv6 client (not even
/// `::ffff:a.b.c.d`, which userspace sees as IPv6 too).
pub fn allow_key(addr: IpAddr, len: u8) -> Result<xdns_allow_key> {
    let mut key = xdns_allow_key::default();
    let len = u32::from(len);
    match addr {
        IpAddr::V4(a) => {
            if len > 32 {
                bail!("prefix length {len} > 32 for {a}");
            }
            key.family = 4;
            key.addr[..4].copy_from_slice(&a.octets());
        }
        IpAddr::V6(a) => {
            if len > 128 {
                bail!("prefix length {len} > 128 for {a}");
            }
            key.family = 6;
            key.addr = a.octets();
        }
    }
    // Bits beyond the prefix are cleared so equal prefixes are equal keys.
    for (i, b) in key.addr.iter_mut().enumerate() {
        let keep = len.saturating_sub(8 * i as u32).min(8);
        *b &= if keep == 0 { 0 } else { 0xffu8 << (8 - keep) };
    }
    key.prefixlen = 8 + len;
    Ok(key)
}

/// Parse `198.18.0.0/15`, `2001:db8::/32` or a bare address (a host prefix).
pub fn parse_prefix(s: &str) -> Result<(IpAddr, u8)> {
    let (a, l) = match s.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (s, None),
    };
    let addr: IpAddr = a.trim().parse().with_context(|| format!("bad address in prefix {s:?}"))?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    let len = match l {
        Some(l) => l.trim().parse::<u8>().with_context(|| format!("bad prefix length in {s:?}"))?,
        None => max,
    };
    if len > max {
        bail!("prefix length {len} > {max} in {s:?}");
    }
    Ok((addr, len))
}

/// Refresh requests from XDP: one [`CacheKey`] per cache entry hit inside its prefetch window.
/// A thread polls the ring buffer; dropping this stops it.
pub struct PrefetchEvents {
    rx: mpsc::Receiver<CacheKey>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// Where the ring buffer callback sends keys.
struct SinkCtx {
    tx: mpsc::Sender<CacheKey>,
}

/// The key of one `struct xdns_cache_event`, `None` if malformed.
pub fn event_key(data: &[u8]) -> Option<CacheKey> {
    if data.len() < std::mem::size_of::<xdns_cache_event>() {
        return None;
    }
    // SAFETY: `data` holds at least one `xdns_cache_event` (plain bytes, any bit pattern
    // valid); read_unaligned copes with the ring buffer's 8-byte alignment or any other.
    let ev: xdns_cache_event = unsafe { std::ptr::read_unaligned(data.as_ptr().cast()) };
    let n = usize::from(ev.name_len);
    let name = ev.name.get(..n)?.to_vec();
    xdns_wire::name::is_valid(&name).then_some(CacheKey { qname: name, qtype: ev.qtype, dnssec_ok: ev.do_bit != 0 })
}

unsafe extern "C" fn on_event(ctx: *mut libc::c_void, data: *mut libc::c_void, size: libbpf_sys::size_t) -> i32 {
    // SAFETY: `ctx` is the `SinkCtx` owned by the polling thread for the ring buffer's whole
    // life; libbpf passes `size` readable bytes at `data` for the duration of the callback.
    let (sink, bytes) = unsafe { (&*(ctx as *const SinkCtx), std::slice::from_raw_parts(data as *const u8, size as usize)) };
    if let Some(k) = event_key(bytes) {
        let _ = sink.tx.send(k);
    }
    0
}

impl PrefetchEvents {
    /// Start reading the ring buffer `fd` (`xdns_cache_events`).
    pub fn start(fd: OwnedFd) -> Result<Self> {
        let (tx, rx) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = mpsc::channel::<Result<()>>();
        let stop2 = stop.clone();
        let thread = std::thread::Builder::new().name("xdns-prefetch".into()).spawn(move || {
            crate::threads::no_caps_after_switch();
            let sink = Box::new(SinkCtx { tx });
            let ctx = (&*sink as *const SinkCtx).cast_mut().cast::<libc::c_void>();
            // SAFETY: `fd` is a ring buffer map fd we own for the whole loop; `ctx` points to
            // `sink`, which outlives the ring buffer (freed below before `sink` drops).
            let rb = unsafe { libbpf_sys::ring_buffer__new(fd.as_raw_fd(), Some(on_event), ctx, std::ptr::null()) };
            if rb.is_null() {
                let _ = ready_tx.send(Err(anyhow::anyhow!("ring_buffer__new: {}", std::io::Error::last_os_error())));
                return;
            }
            let _ = ready_tx.send(Ok(()));
            while !stop2.load(Ordering::Relaxed) {
                // SAFETY: `rb` is the live ring buffer created above.
                let rc = unsafe { libbpf_sys::ring_buffer__poll(rb, 100) };
                if rc < 0 && rc != -libc::EINTR {
                    break;
                }
            }
            // SAFETY: `rb` came from ring_buffer__new and is freed once.
            unsafe { libbpf_sys::ring_buffer__free(rb) };
            drop(sink);
            drop(fd);
        })?;
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(Self { rx, stop, thread: Some(thread) }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => {
                let _ = thread.join();
                bail!("the prefetch reader stopped while starting")
            }
        }
    }

    /// The next key, waiting at most `timeout`.
    pub fn recv_timeout(&self, timeout: Duration) -> Option<CacheKey> {
        self.rx.recv_timeout(timeout).ok()
    }

    /// The next key if one is waiting.
    pub fn try_recv(&self) -> Option<CacheKey> {
        self.rx.try_recv().ok()
    }

    /// Block until the next key (`None` once the reader has stopped).
    pub fn recv(&self) -> Option<CacheKey> {
        self.rx.recv().ok()
    }
}

impl Drop for PrefetchEvents {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xdns_wire::body::BodyWriter;

    const NAME: &[u8] = b"\x03www\x07example\x03com\x00";

    fn answer(records: usize, rdlen: usize) -> CachedAnswer {
        let mut w = BodyWriter::new(NAME).unwrap();
        for _ in 0..records {
            w.write_rr(NAME, true, 16, 300, &vec![7u8; rdlen]).unwrap();
        }
        CachedAnswer {
            qname: NAME.to_vec(),
            qtype: 16,
            dnssec_ok: true,
            body: w.finish(),
            stored_at_ns: 1,
            expires_at_ns: 2,
            prefetch_at_ns: 3,
        }
    }

    /// Classes by body size; limits on size and record count; case-insensitive keys.
    #[test]
    fn encode_classes_and_limits() {
        assert_eq!(encode_entry(9, &answer(1, 10)).unwrap().1.class(), 0);
        assert_eq!(encode_entry(9, &answer(4, 100)).unwrap().1.class(), 1);
        assert_eq!(encode_entry(9, &answer(4, 300)).unwrap().1.class(), 2);
        assert_eq!(encode_entry(9, &answer(5, 300)).err(), Some(NotCached::TooLarge));
        assert_eq!(encode_entry(9, &answer(MAX_RRS + 1, 1)).err(), Some(NotCached::TooManyRecords));
        let mut upper = answer(1, 10);
        upper.qname = b"\x03WWW\x07Example\x03COM\x00".to_vec();
        let (k1, _) = encode_entry(9, &answer(1, 10)).unwrap();
        let (k2, v2) = encode_entry(9, &upper).unwrap();
        assert_eq!(bytes_of(&k1), bytes_of(&k2));
        let CacheValue::S(v) = v2 else { panic!("class") };
        assert_eq!(&v.m.name[..NAME.len()], NAME);
        assert_eq!((v.m.nttl, v.m.ttl_off[0], v.m.ans.base_len, v.m.ans.flags), (1, 6, 17, 0));
        assert_eq!(MAX_RRS, 64);
        assert!(v.m.tag != 0 && v.tag_end == v.m.tag);
        let (_, v3) = encode_entry(9, &upper).unwrap();
        let CacheValue::S(v3) = v3 else { panic!("class") };
        assert_ne!(v3.m.tag, v.m.tag, "every write has its own tag");
    }

    #[test]
    fn allow_keys_and_prefixes() {
        let k = allow_key("198.19.7.1".parse().unwrap(), 15).unwrap();
        assert_eq!((k.prefixlen, k.family), (23, 4));
        assert_eq!(&k.addr[..5], &[198, 18, 0, 0, 0]);
        let k = allow_key("2001:db8:ffff::1".parse().unwrap(), 33).unwrap();
        assert_eq!((k.prefixlen, k.family), (41, 6));
        assert_eq!(&k.addr[..6], &[0x20, 0x01, 0x0d, 0xb8, 0x80, 0]);
        assert_eq!(parse_prefix("2001:db8::/32").unwrap(), ("2001:db8::".parse().unwrap(), 32));
        assert_eq!(parse_prefix("198.18.0.2").unwrap().1, 32);
        assert!(parse_prefix("198.18.0.0/33").is_err());
        assert!(allow_key("::".parse().unwrap(), 129).is_err());
    }
}
