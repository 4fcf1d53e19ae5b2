//! The resolver's answer cache in the kernel (`bpf/cache.h`): [`KernelCache`] writes and
//! deletes entries of the `xdns_cache_{s,m,l}` LRU maps (it implements
//! [`xdns_wire::AnswerCache`]), [`PrefetchEvents`] reads the refresh requests XDP sends through
//! the `xdns_cache_events` ring buffer, and [`allow_key`] builds keys of the `xdns_allow` trie.
//!
//! Both hold duplicated map file descriptors, not the skeleton: they are `Send + Sync` and keep
//! the maps alive on their own.

use std::net::IpAddr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use xdns_wire::{AnswerCache, CacheKey, CachedAnswer};

use crate::data::csum16;
use crate::hash::name_hash;
use crate::maps::bytes_of;
use crate::types::{
    xdns_allow_key, xdns_allow_table, xdns_answer, xdns_body_class, xdns_cache_event, xdns_cache_key, xdns_cache_l, xdns_cache_m,
    xdns_cache_meta, xdns_cache_s,
};

/// Records per cached body whose TTLs the kernel rewrites (`XDNS_CACHE_MAX_RRS`), from the
/// generated layout.
pub const MAX_RRS: usize =
    (std::mem::size_of::<xdns_cache_meta>() - std::mem::offset_of!(xdns_cache_meta, ttl_off)) / 2;

/// Entries of each cache map (LRU maps are preallocated: memory is `entries * bytes_per_entry`).
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
    /// 32768 + 8192 + 2048 entries, about 34 MiB of kernel memory (see [`bytes_per_entry`]).
    fn default() -> Self {
        Self { s: 32768, m: 8192, l: 2048 }
    }
}

/// Kernel memory of one cached answer in each class: LRU element header (`struct htab_elem`,
/// ≈48 B with its LRU node), key and value rounded to 8.
pub fn bytes_per_entry() -> [(&'static str, usize); 3] {
    const ELEM: usize = 48;
    let r8 = |n: usize| n.div_ceil(8) * 8;
    let k = r8(std::mem::size_of::<xdns_cache_key>());
    [
        ("cache S", ELEM + k + r8(std::mem::size_of::<xdns_cache_s>())),
        ("cache M", ELEM + k + r8(std::mem::size_of::<xdns_cache_m>())),
        ("cache L", ELEM + k + r8(std::mem::size_of::<xdns_cache_l>())),
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
            _pad: [0; 2],
        },
        nttl: ttls.len() as u16,
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

struct Inner {
    seed: u64,
    /// `xdns_cache_s`, `_m`, `_l`.
    maps: [OwnedFd; 3],
}

/// The kernel answer cache: writes the LRU maps of a loaded program. Cheap to clone, `Send +
/// Sync`; keeps the maps alive (not the program) while it exists.
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
    /// Over the three cache map fds (S, M, L) of a program loaded with hash seed `seed`.
    pub fn new(seed: u64, maps: [OwnedFd; 3]) -> Self {
        Self { inner: Arc::new(Inner { seed, maps }) }
    }

    fn delete(&self, class: usize, key: &xdns_cache_key) -> Result<(), String> {
        let fd = self.inner.maps[class].as_raw_fd();
        // SAFETY: `fd` is a hash map fd we own whose key size is `size_of::<xdns_cache_key>()`;
        // the key pointer is valid for that many bytes during the call.
        let rc = unsafe { libbpf_sys::bpf_map_delete_elem(fd, (key as *const xdns_cache_key).cast()) };
        if rc == -libc::ENOENT {
            return Ok(());
        }
        errno_result(rc, "deleting a cache entry")
    }

    /// Write raw value bytes for `key` into class `class` (0 = S, 1 = M, 2 = L): tests use it
    /// to stage entries the encoder never makes (a torn write: `tag != tag_end`).
    #[doc(hidden)]
    pub fn put_raw(&self, class: usize, key: &xdns_cache_key, value: &[u8]) -> Result<(), String> {
        let fd = self.inner.maps.get(class).ok_or("no such class")?.as_raw_fd();
        // SAFETY: as in `try_insert`; the kernel reads exactly the map's value size, so `value`
        // must be that long (checked by the caller's use of the ABI structs).
        let rc = unsafe {
            libbpf_sys::bpf_map_update_elem(fd, (key as *const xdns_cache_key).cast(), value.as_ptr().cast(), u64::from(libbpf_sys::BPF_ANY))
        };
        errno_result(rc, "writing a raw cache entry")
    }

    /// Insert, telling why an answer stays in userspace (`Ok(Err(_))`; any old entry removed).
    pub fn try_insert(&self, answer: &CachedAnswer) -> Result<Result<(), NotCached>, String> {
        match encode_entry(self.inner.seed, answer) {
            Ok((key, value)) => {
                let class = value.class();
                let fd = self.inner.maps[class].as_raw_fd();
                let v = value.bytes();
                // SAFETY: `fd` is the LRU map of this value's class; key and value pointers are
                // valid for the map's key and value sizes (the generated ABI structs) during
                // the call.
                let rc = unsafe {
                    libbpf_sys::bpf_map_update_elem(
                        fd,
                        (&key as *const xdns_cache_key).cast(),
                        v.as_ptr().cast(),
                        u64::from(libbpf_sys::BPF_ANY),
                    )
                };
                errno_result(rc, "writing a cache entry")?;
                // A key lives in one class: drop what an earlier answer left in another.
                for other in (0..3).filter(|&c| c != class) {
                    self.delete(other, &key)?;
                }
                Ok(Ok(()))
            }
            Err(why) => {
                self.remove(&answer.key())?;
                Ok(Err(why))
            }
        }
    }

    /// Entries in each map (S, M, L), all keys walked: for tests and reports.
    pub fn entries(&self) -> [usize; 3] {
        let mut out = [0; 3];
        for (i, o) in out.iter_mut().enumerate() {
            *o = self.keys(i).len();
        }
        out
    }

    /// Every key of class `class` (0 = S, 1 = M, 2 = L), walked with `bpf_map_get_next_key`.
    /// Bounded by the map's size (an LRU map never holds more), so a walk restarted by a
    /// concurrent delete cannot go on forever.
    fn keys(&self, class: usize) -> Vec<xdns_cache_key> {
        let fd = self.inner.maps[class].as_raw_fd();
        let mut info = libbpf_sys::bpf_map_info::default();
        let mut len = std::mem::size_of::<libbpf_sys::bpf_map_info>() as u32;
        // SAFETY: `fd` is a map fd we own; `info` is valid for writes of `len` bytes.
        let rc = unsafe { libbpf_sys::bpf_obj_get_info_by_fd(fd, (&mut info as *mut libbpf_sys::bpf_map_info).cast(), &mut len) };
        let max = if rc == 0 { info.max_entries as usize } else { usize::MAX };
        let mut out = Vec::new();
        let mut next = xdns_cache_key::default();
        while out.len() < max {
            let prev: *const libc::c_void = match out.last() {
                None => std::ptr::null(),
                Some(k) => (k as *const xdns_cache_key).cast(),
            };
            // SAFETY: `fd` is a map fd we own; `prev` is null or a valid key; `next` is valid
            // for writes of one key.
            let rc = unsafe { libbpf_sys::bpf_map_get_next_key(fd, prev, (&mut next as *mut xdns_cache_key).cast()) };
            if rc != 0 {
                break;
            }
            out.push(next);
        }
        out
    }

    /// Deletes the entries whose question name (lowercased wire form) `matches`, every type
    /// and DO bit, whoever wrote them (`xdns flush NAME`: the kernel may hold answers the
    /// userspace cache has dropped). Walks every key and reads its entry's name. Returns how
    /// many were deleted.
    pub fn remove_names(&self, matches: &dyn Fn(&[u8]) -> bool) -> Result<usize, String> {
        let sizes = [
            std::mem::size_of::<xdns_cache_s>(),
            std::mem::size_of::<xdns_cache_m>(),
            std::mem::size_of::<xdns_cache_l>(),
        ];
        let at = std::mem::offset_of!(xdns_cache_meta, name); // meta leads every class
        let mut n = 0;
        for (class, size) in sizes.into_iter().enumerate() {
            let fd = self.inner.maps[class].as_raw_fd();
            let mut value = vec![0u8; size];
            for key in self.keys(class) {
                // SAFETY: `fd` is the LRU map of this class; `key` is one of its keys and
                // `value` has room for one of its values.
                let rc = unsafe {
                    libbpf_sys::bpf_map_lookup_elem(fd, (&key as *const xdns_cache_key).cast(), value.as_mut_ptr().cast())
                };
                if rc != 0 {
                    continue; // gone meanwhile
                }
                let name = &value[at..at + usize::from(key.name_len).min(255)];
                if matches(name) {
                    self.delete(class, &key)?;
                    n += 1;
                }
            }
        }
        Ok(n)
    }

    /// Deletes every entry of the three maps, whoever wrote it (`xdns flush`: the userspace
    /// cache may have dropped answers the kernel LRU still serves). Keys are collected first,
    /// then deleted; the walk is repeated while it finds entries (at most 4 times: entries
    /// written meanwhile are fresh answers of a running resolution). Returns how many were
    /// deleted.
    pub fn clear(&self) -> Result<usize, String> {
        let mut n = 0;
        for _ in 0..4 {
            let mut found = 0;
            for class in 0..3 {
                for key in self.keys(class) {
                    found += 1;
                    self.delete(class, &key)?;
                }
            }
            n += found;
            if found == 0 {
                break;
            }
        }
        Ok(n)
    }
}

impl AnswerCache for KernelCache {
    fn insert(&self, answer: &CachedAnswer) -> Result<(), String> {
        self.try_insert(answer).map(|_| ())
    }

    fn remove(&self, key: &CacheKey) -> Result<(), String> {
        let Some(k) = cache_key(self.inner.seed, &key.qname, key.qtype, key.dnssec_ok) else {
            return Ok(());
        };
        for class in 0..3 {
            self.delete(class, &k)?;
        }
        Ok(())
    }

    fn clear(&self) -> Result<usize, String> {
        KernelCache::clear(self)
    }

    fn remove_names(&self, matches: &dyn Fn(&[u8]) -> bool) -> Result<usize, String> {
        KernelCache::remove_names(self, matches)
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
