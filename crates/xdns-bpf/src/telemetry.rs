//! Telemetry (stage 5, `bpf/telemetry.h`): the selection rules, the log-linear histogram
//! buckets shared by the kernel and userspace, and the kernel half's maps.
//!
//! - [`bucket`], [`lower`], [`upper`], [`Histogram`]: the bucket math of `xdns_abi.h`
//!   (`XDNS_TEL_SUB_BITS` linear steps per power of two: a bucket is at most 1/64 of its lower
//!   bound wide, so a value reported as its bucket's middle is off by less than 0.8%), the
//!   same function as `xdns_tel_bucket` in C.
//! - [`Rule`]: one selection rule, parsed from `src=… dst=… qname=… qtype=… path=… sample=N`,
//!   encoded for the kernel, and matched by userspace with the kernel's semantics.
//! - [`summarize`], [`sum_admits`]: a set's summary (`struct xdns_tel_sum`), the bitmaps of
//!   address bits the kernel checks inline before it calls the rules' address check: a
//!   necessary condition, so traffic no rule can select by address skips the call.
//! - [`TelemetryMaps`]: the rule sets (`xdns_tel_ctl`, two sets, flipped whole), the
//!   per-CPU histograms of the kernel paths (`xdns_tel_hist`), and the dnstap events of
//!   selected kernel answers (`xdns_tel_events`, a ring buffer: [`TelEvent`]).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use anyhow::{bail, Context, Result};
use libbpf_rs::{MapCore, MapFlags};

use crate::types::{xdns_tel_ctl, xdns_tel_event, xdns_tel_hist, xdns_tel_rule, xdns_tel_set, xdns_tel_sum};

/// Linear buckets per power of two: 2^SUB_BITS (`XDNS_TEL_SUB_BITS`).
pub const SUB_BITS: u32 = 6;
/// Buckets per path (`XDNS_TEL_BUCKETS`); the last one is open.
pub const BUCKETS: usize = 2048;
/// Rules per set (`XDNS_TEL_RULES`).
pub const MAX_RULES: usize = 8;
/// Longest qname suffix of a rule, wire bytes (`XDNS_TEL_SFX_MAX`).
pub const SFX_MAX: usize = 64;
/// The EDNS option code of in-band probes (`XDNS_TEL_OPTION`, in the local-use range
/// 65001–65534 of RFC 6891 §9).
pub const OPTION: u16 = 65050;
/// Its data in answers: receive ns, transmit ns, u64 big-endian (`XDNS_TEL_PROBE_LEN`).
pub const PROBE_LEN: usize = 16;
/// dnstap from XDP: the longest query message an event carries (`XDNS_TEL_DQ_MAX`).
pub const DQ_MAX: usize = 512;
/// ... and the longest answer (`XDNS_TEL_DR_MAX`); longer: no event, counted `dtap_long`.
pub const DR_MAX: usize = 2048;
/// The size of an event's header (`struct xdns_tel_event`).
pub const EVENT_HEADER: usize = 64;

/// Address bits a summary bitmap is indexed by (`XDNS_TEL_SUM_BITS`): 2^12 bits each.
pub const SUM_BITS: u32 = 12;
/// 64-bit words of one summary bitmap (`XDNS_TEL_SUM_WORDS`).
pub const SUM_WORDS: usize = 1 << (SUM_BITS - 6);

// The summary's layout, as bpf/xdns_abi.h pins it with _Static_assert (the Rust types are
// generated from the program's BTF; these say the two agree).
const _: () = {
    assert!(std::mem::size_of::<xdns_tel_sum>() == 8 + 4 * 8 * SUM_WORDS);
    assert!(std::mem::offset_of!(xdns_tel_sum, shift) == 0);
    assert!(std::mem::offset_of!(xdns_tel_sum, any) == 4);
    assert!(std::mem::offset_of!(xdns_tel_sum, bits) == 8);
    assert!(std::mem::offset_of!(xdns_tel_set, sum) == 904);
    assert!(std::mem::size_of::<xdns_tel_set>() == 904 + 8 + 4 * 8 * SUM_WORDS);
    assert!(std::mem::offset_of!(xdns_tel_ctl, active) == 2 * std::mem::size_of::<xdns_tel_set>());
};

/// The histogram bucket of `ns` (the C twin is `xdns_tel_bucket`).
pub fn bucket(ns: u64) -> usize {
    let sub = 1u64 << SUB_BITS;
    if ns < sub {
        return ns as usize;
    }
    let e = 63 - ns.leading_zeros();
    let b = (((e - SUB_BITS + 1) as u64) << SUB_BITS) + (ns >> (e - SUB_BITS)) - sub;
    (b as usize).min(BUCKETS - 1)
}

/// Smallest value of bucket `b`.
pub fn lower(b: usize) -> u64 {
    let sub = 1usize << SUB_BITS;
    if b < sub {
        return b as u64;
    }
    let e = (b >> SUB_BITS) as u32 - 1 + SUB_BITS;
    let m = (b & (sub - 1)) as u64 + sub as u64;
    m << (e - SUB_BITS)
}

/// One past the largest value of bucket `b` (`u64::MAX` for the last, open, bucket).
pub fn upper(b: usize) -> u64 {
    if b + 1 >= BUCKETS {
        u64::MAX
    } else {
        lower(b + 1)
    }
}

/// The paths histograms are kept for (`enum xdns_tel_path`, then [`RESOLVER_UPSTREAM`], which
/// is userspace's alone: a rule's bit for it never matches in the kernel).
pub const PATHS: [&str; 6] = ["kernel_auth", "kernel_cache", "user_auth", "resolver_hit", "resolver_miss", "resolver_upstream"];
/// Path index of the kernel's authoritative answers.
pub const KERNEL_AUTH: usize = 0;
/// Path index of the kernel's cache answers.
pub const KERNEL_CACHE: usize = 1;
/// Path index of userspace authoritative answers.
pub const USER_AUTH: usize = 2;
/// Path index of userspace answers from the resolver's caches.
pub const RESOLVER_HIT: usize = 3;
/// Path index of userspace answers after resolving.
pub const RESOLVER_MISS: usize = 4;
/// Path index of the resolver's upstream queries (each exchange, send to reply; userspace
/// only, past `XDNS_TEL_PATHS`).
pub const RESOLVER_UPSTREAM: usize = 5;

/// A histogram's counts (one path, summed over CPUs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Histogram {
    pub count: u64,
    pub sum_ns: u64,
    pub buckets: Vec<u64>,
}

impl Default for Histogram {
    fn default() -> Self {
        Self { count: 0, sum_ns: 0, buckets: vec![0; BUCKETS] }
    }
}

impl Histogram {
    /// Count one value.
    pub fn record(&mut self, ns: u64) {
        self.count += 1;
        self.sum_ns += ns;
        self.buckets[bucket(ns)] += 1;
    }

    /// The `q` quantile (0..=1): the middle of the bucket holding it; `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        let total: u64 = self.buckets.iter().sum();
        if total == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (b, &n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                let lo = lower(b);
                let hi = upper(b).min(lo.saturating_mul(2).max(lo + 1));
                return Some(lo + (hi - lo - 1) / 2);
            }
        }
        None
    }

    /// Counts at or below each of `bounds` (cumulative, as Prometheus `le` buckets). A bound
    /// is counted up to the last bucket whose values all lie at or below it.
    pub fn cumulative(&self, bounds: &[u64]) -> Vec<u64> {
        let mut out = Vec::with_capacity(bounds.len());
        let (mut b, mut acc) = (0usize, 0u64);
        for &le in bounds {
            while b < BUCKETS && upper(b) <= le.saturating_add(1) {
                acc += self.buckets[b];
                b += 1;
            }
            out.push(acc);
        }
        out
    }

    /// Add `other`'s counts.
    pub fn merge(&mut self, other: &Histogram) {
        self.count += other.count;
        self.sum_ns += other.sum_ns;
        for (a, b) in self.buckets.iter_mut().zip(&other.buckets) {
            *a += b;
        }
    }
}

/// `le` bounds (ns) for exporting: two per power of two from 64 ns to 2^34 ns (17 s), each
/// the lower edge of a bucket less one, so that every bucket is wholly under a bound or not.
pub fn export_bounds() -> Vec<u64> {
    let mut v = Vec::new();
    for e in 6..34u32 {
        v.push((1u64 << e) - 1);
        v.push((3u64 << (e - 1)) - 1);
    }
    v
}

/// A prefix of a rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Prefix {
    pub addr: IpAddr,
    pub len: u8,
}

impl Prefix {
    fn parse(text: &str) -> Result<Self> {
        let (a, l) = match text.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (text, None),
        };
        let addr: IpAddr = a.parse().with_context(|| format!("`{a}` is not an IP address"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let len = match l {
            Some(l) => l.parse::<u8>().ok().filter(|&n| n <= max).with_context(|| format!("`{l}` is not a prefix length (0..={max})"))?,
            None => max,
        };
        Ok(Self { addr, len })
    }

    fn bytes(&self) -> [u8; 16] {
        let mut b = [0u8; 16];
        match self.addr {
            IpAddr::V4(a) => b[..4].copy_from_slice(&a.octets()),
            IpAddr::V6(a) => b.copy_from_slice(&a.octets()),
        }
        b
    }

    fn contains(&self, ip: IpAddr) -> bool {
        if self.addr.is_ipv4() != ip.is_ipv4() {
            return false;
        }
        let (p, a) = (self.bytes(), Prefix { addr: ip, len: 0 }.bytes());
        let mut bits = u32::from(self.len);
        for i in 0..16 {
            if bits == 0 {
                break;
            }
            let n = bits.min(8);
            let mask = (0xff00u16 >> n) as u8;
            if (p[i] ^ a[i]) & mask != 0 {
                return false;
            }
            bits -= n;
        }
        true
    }
}

/// One selection rule. Every field given must match; the first matching rule of a set decides
/// (then one in `sample` of its answers is timed).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rule {
    pub src: Option<Prefix>,
    pub dst: Option<Prefix>,
    /// Lowercase wire form, root included.
    pub qname: Option<Vec<u8>>,
    pub qtype: Option<u16>,
    /// Bit per path ([`PATHS`]); 0: every path.
    pub paths: u8,
    /// One in `sample` (1: every one).
    pub sample: u32,
}

impl Rule {
    /// Parse `src=P dst=P qname=N qtype=T path=A,B sample=N` (any subset, any order; `all`
    /// alone selects everything).
    pub fn parse(text: &str) -> Result<Self> {
        let mut r = Rule { sample: 1, ..Default::default() };
        for word in text.split_ascii_whitespace() {
            if word == "all" {
                continue;
            }
            let (k, v) = word.split_once('=').with_context(|| format!("`{word}`: expected KEY=VALUE (src, dst, qname, qtype, path, sample)"))?;
            match k {
                "src" => r.src = Some(Prefix::parse(v)?),
                "dst" => r.dst = Some(Prefix::parse(v)?),
                "qname" => {
                    let n = xdns_wire::name::from_presentation(v).map_err(|e| anyhow::anyhow!("`{v}` is not a domain name: {e}"))?;
                    let key = xdns_wire::name::to_key(&n).to_vec();
                    if key.len() > SFX_MAX {
                        bail!("qname `{v}` is longer than {SFX_MAX} bytes in wire form");
                    }
                    r.qname = Some(key);
                }
                "qtype" => r.qtype = Some(xdns_wire::rtype::from_name(v).filter(|&t| t != 0).with_context(|| format!("`{v}` is not a query type"))?),
                "path" => {
                    for p in v.split(',') {
                        let i = PATHS.iter().position(|&n| n == p.replace('-', "_")).with_context(|| format!("`{p}` is not a path (kernel-auth, kernel-cache, user-auth, resolver-hit, resolver-miss, resolver-upstream)"))?;
                        r.paths |= 1 << i;
                    }
                }
                "sample" => r.sample = v.parse::<u32>().ok().filter(|&n| n >= 1).with_context(|| format!("sample `{v}`: expected a whole number >= 1"))?,
                _ => bail!("`{k}`: unknown rule key (src, dst, qname, qtype, path, sample)"),
            }
        }
        if let (Some(s), Some(d)) = (&r.src, &r.dst) {
            if s.addr.is_ipv4() != d.addr.is_ipv4() {
                bail!("src and dst are of different address families");
            }
        }
        Ok(r)
    }

    /// Does this rule select an answer of `path` from `client` to `server` for `qname`
    /// (wire form, any case) and `qtype`? (The kernel's semantics, before sampling.)
    pub fn matches(&self, path: usize, client: IpAddr, server: IpAddr, qname: &[u8], qtype: u16) -> bool {
        if self.paths != 0 && self.paths & (1 << path) == 0 {
            return false;
        }
        if self.src.is_some_and(|p| !p.contains(client)) || self.dst.is_some_and(|p| !p.contains(server)) {
            return false;
        }
        if self.qtype.is_some_and(|t| t != qtype) {
            return false;
        }
        if let Some(sfx) = &self.qname {
            let low = qname.to_ascii_lowercase();
            if !xdns_wire::name::is_subdomain(&low, sfx) {
                return false;
            }
        }
        true
    }

    /// The kernel's form.
    pub fn encode(&self) -> xdns_tel_rule {
        // SAFETY: the ABI struct is plain data (integers and byte arrays): all-zero is valid.
        let mut r: xdns_tel_rule = unsafe { std::mem::zeroed() };
        if let Some(p) = self.src {
            r.src = p.bytes();
            r.src_len = p.len;
            r.family = if p.addr.is_ipv4() { 4 } else { 6 };
        }
        if let Some(p) = self.dst {
            r.dst = p.bytes();
            r.dst_len = p.len;
            r.family = if p.addr.is_ipv4() { 4 } else { 6 };
        }
        if let Some(n) = &self.qname {
            r.sfx[..n.len()].copy_from_slice(n);
            r.sfx_len = n.len() as u8;
        }
        r.qtype = self.qtype.unwrap_or(0);
        r.paths = self.paths;
        r.sample = self.sample;
        r
    }
}

impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut words = Vec::new();
        if let Some(p) = self.src {
            words.push(format!("src={}/{}", p.addr, p.len));
        }
        if let Some(p) = self.dst {
            words.push(format!("dst={}/{}", p.addr, p.len));
        }
        if let Some(n) = &self.qname {
            words.push(format!("qname={}", xdns_wire::name::to_presentation(n)));
        }
        if let Some(t) = self.qtype {
            words.push(format!("qtype={}", xdns_wire::rtype::name(t)));
        }
        if self.paths != 0 {
            let p: Vec<&str> = (0..PATHS.len()).filter(|i| self.paths & (1 << i) != 0).map(|i| PATHS[i]).collect();
            words.push(format!("path={}", p.join(",").replace('_', "-")));
        }
        if self.sample > 1 {
            words.push(format!("sample={}", self.sample));
        }
        if words.is_empty() {
            words.push("all".into());
        }
        f.write_str(&words.join(" "))
    }
}

/// Paths of the kernel (`xdns_tel_by_addr` skips a rule for none of them).
const KERNEL_PATHS: u8 = 1 << KERNEL_AUTH | 1 << KERNEL_CACHE;

/// The summary's family index (0 IPv4, 1 IPv6) of `a`, and its first 64 bits as the kernel
/// reads them (a big-endian number; IPv4's 32 bits in the top half).
fn sum_key(a: IpAddr) -> (usize, u64) {
    match a {
        IpAddr::V4(a) => (0, u64::from(u32::from(a)) << 32),
        IpAddr::V6(a) => (1, (u128::from(a) >> 64) as u64),
    }
}

/// Does `sum` admit `client` and `server` (one family)? The kernel's inline check
/// (`xdns_tel_pre`, bpf/telemetry.h): `any` admits all; else each address's window of
/// [`SUM_BITS`] bits is a bit of its family's and side's bitmap; both must be set.
pub fn sum_admits(sum: &xdns_tel_sum, client: IpAddr, server: IpAddr) -> bool {
    if sum.any != 0 {
        return true;
    }
    let bit = |side: usize, a: IpAddr| {
        let (f, k) = sum_key(a);
        let m = f * 2 + side;
        let i = ((k >> (sum.shift[m] & 63)) & ((1 << SUM_BITS) - 1)) as usize;
        sum.bits[m * SUM_WORDS + (i >> 6)] >> (i & 63) & 1 == 1
    };
    bit(0, client) && bit(1, server)
}

/// Does some rule of `set` allow `client` and `server` on a kernel path by their addresses
/// alone? The kernel's `xdns_tel_by_addr` over the kernel's form of the rules (family,
/// prefixes masked by their length, rules for userspace paths alone skipped): what the
/// summary must never rule out.
pub fn set_allows(set: &xdns_tel_set, client: IpAddr, server: IpAddr) -> bool {
    let bits = |a: IpAddr| -> u128 {
        match a {
            IpAddr::V4(a) => u128::from(u32::from(a)) << 96,
            IpAddr::V6(a) => u128::from(a),
        }
    };
    let under = |a: IpAddr, p: &[u8; 16], len: u8| {
        let m = if len == 0 { 0 } else { u128::MAX << (128 - u32::from(len).min(128)) };
        (bits(a) ^ u128::from_be_bytes(*p)) & m == 0
    };
    let fam = if client.is_ipv4() { 4 } else { 6 };
    set.rules.iter().take((set.nrules as usize).min(MAX_RULES)).any(|r| {
        (r.paths == 0 || r.paths & KERNEL_PATHS != 0)
            && (r.family == 0 || r.family == fam)
            && (r.src_len == 0 || under(client, &r.src, r.src_len))
            && (r.dst_len == 0 || under(server, &r.dst, r.dst_len))
    })
}

/// Compile `set.sum` from the set's rules (`set.rules[..nrules]`, the kernel's form): for each
/// family and side, the window of [`SUM_BITS`] address bits ends at the shortest prefix of the
/// rules that may apply there (rules for the family or for any, on a kernel path), but never
/// before bit 12; a rule with a prefix at least that long sets the one bit its prefix gives, a
/// shorter prefix every bit it covers (2^(12 - len)), a rule without one there every bit. No
/// such rule: no bit, so that family is never selected by this set. The window's bits of two
/// addresses may be equal where the addresses differ (the window is 12 bits of them): a false
/// positive the call then decides, never a false negative ([`set_allows`] ⇒ [`sum_admits`]).
/// All four bitmaps full (a rule with no prefix, on a kernel path): `any`, and the kernel
/// skips the check (which every packet would pass, for nothing).
pub fn summarize(set: &mut xdns_tel_set) {
    let n = (set.nrules as usize).min(MAX_RULES);
    // SAFETY: plain data (integers), all-zero is valid.
    set.sum = unsafe { std::mem::zeroed() };
    for (f, (fam, width)) in [(4u8, 32u32), (6, 64)].into_iter().enumerate() {
        for side in 0..2 {
            // (the prefix's first 64 bits, its length, at most the key's width)
            let prefixes: Vec<(u64, u32)> = set.rules[..n]
                .iter()
                .filter(|r| (r.paths == 0 || r.paths & KERNEL_PATHS != 0) && (r.family == 0 || r.family == fam))
                .map(|r| {
                    let (p, len) = if side == 0 { (&r.src, r.src_len) } else { (&r.dst, r.dst_len) };
                    let k = u64::from_be_bytes(p[..8].try_into().unwrap());
                    let k = if f == 0 { k & !0xffff_ffff } else { k };
                    (k, u32::from(len).min(width))
                })
                .collect();
            let m = f * 2 + side;
            let Some(shortest) = prefixes.iter().map(|&(_, l)| l).min() else {
                set.sum.shift[m] = (64 - SUM_BITS) as u8;
                continue;
            };
            let end = shortest.clamp(SUM_BITS, width);
            let shift = 64 - end;
            set.sum.shift[m] = shift as u8;
            let map = &mut set.sum.bits[m * SUM_WORDS..(m + 1) * SUM_WORDS];
            for (k, len) in prefixes {
                // the window's bits the prefix fixes (its first ones); the rest are free
                let fixed = (len + SUM_BITS).saturating_sub(end).min(SUM_BITS);
                let free = SUM_BITS - fixed;
                let first = ((k >> shift) as usize & ((1 << SUM_BITS) - 1)) & !((1usize << free) - 1);
                for i in first..first + (1 << free) {
                    map[i >> 6] |= 1 << (i & 63);
                }
            }
        }
    }
    // every bit set (a rule without prefixes): the kernel skips the check
    set.sum.any = u32::from(set.sum.bits.iter().all(|&w| w == !0));
}

fn bytes_of<T>(v: &T) -> &[u8] {
    // SAFETY: T is one of the plain-data ABI structs; reading its bytes is always valid.
    unsafe { std::slice::from_raw_parts(v as *const T as *const u8, std::mem::size_of::<T>()) }
}

/// One dnstap event of the kernel (`struct xdns_tel_event` and the two messages after it):
/// a kernel answer a rule selected, with its query as received.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TelEvent {
    /// Receive time, ns of `CLOCK_MONOTONIC` (`bpf_ktime_get_ns`).
    pub rx_ns: u64,
    /// Transmit time, likewise (read just before the answer left).
    pub tx_ns: u64,
    /// The client's address and port (the query's source).
    pub client: SocketAddr,
    /// Ours (the query's destination).
    pub server: SocketAddr,
    /// [`KERNEL_AUTH`] or [`KERNEL_CACHE`].
    pub path: usize,
    /// The frame's VLAN ID (0: untagged).
    pub vlan: u16,
    /// The query's DNS message as received.
    pub query: Vec<u8>,
    /// The answer's DNS message as sent.
    pub response: Vec<u8>,
}

impl TelEvent {
    /// An event from a ring buffer record; `None` when it is not one (too short, lengths
    /// that do not add up, an unknown family or path).
    pub fn parse(rec: &[u8]) -> Option<Self> {
        if rec.len() < EVENT_HEADER {
            return None;
        }
        // SAFETY: `rec` holds at least the header (plain integers and byte arrays, any bit
        // pattern valid); read_unaligned copes with any alignment.
        let h: xdns_tel_event = unsafe { std::ptr::read_unaligned(rec.as_ptr().cast()) };
        let (q, r) = (usize::from(h.qlen), usize::from(h.rlen));
        if q == 0 || q > DQ_MAX || r == 0 || r > DR_MAX || rec.len() != EVENT_HEADER + q + r {
            return None;
        }
        let ip = |b: &[u8; 16]| -> Option<IpAddr> {
            match h.family {
                4 => Some(IpAddr::V4(Ipv4Addr::new(b[0], b[1], b[2], b[3]))),
                6 => Some(IpAddr::V6(Ipv6Addr::from(*b))),
                _ => None,
            }
        };
        let path = usize::from(h.path);
        if path != KERNEL_AUTH && path != KERNEL_CACHE {
            return None;
        }
        Some(Self {
            rx_ns: h.rx_ns,
            tx_ns: h.tx_ns,
            client: SocketAddr::new(ip(&h.client)?, h.client_port),
            server: SocketAddr::new(ip(&h.server)?, h.server_port),
            path,
            vlan: h.vlan,
            query: rec[EVENT_HEADER..EVENT_HEADER + q].to_vec(),
            response: rec[EVENT_HEADER + q..].to_vec(),
        })
    }
}

/// The kernel half's maps, on duplicated fds (usable from any thread, without the program).
pub struct TelemetryMaps {
    ctl: libbpf_rs::MapHandle,
    hist: libbpf_rs::MapHandle,
    events: libbpf_rs::MapHandle,
}

impl TelemetryMaps {
    pub(crate) fn new(ctl: libbpf_rs::MapHandle, hist: libbpf_rs::MapHandle, events: libbpf_rs::MapHandle) -> Self {
        Self { ctl, hist, events }
    }

    /// Read the ring buffer `xdns_tel_events` until `stop` is set: every record to `f` (the
    /// records waiting at a wake-up in one batch), then `batch_done` once per wake-up (also
    /// after a wait that found none), waiting at most `poll` between looks at `stop`. Runs on
    /// the caller's thread.
    pub fn read_events(
        &self,
        poll: std::time::Duration,
        stop: &std::sync::atomic::AtomicBool,
        f: impl FnMut(&[u8]),
        batch_done: impl FnMut(),
    ) -> Result<()> {
        crate::ring::read(&self.events, "xdns_tel_events", poll, stop, f, batch_done)
    }

    /// Every record waiting in `xdns_tel_events` now, as its bytes (tests).
    pub fn take_events(&self) -> Result<Vec<Vec<u8>>> {
        let mut out = Vec::new();
        {
            let mut b = libbpf_rs::RingBufferBuilder::new();
            b.add(&self.events, |rec: &[u8]| {
                out.push(rec.to_vec());
                0
            })?;
            b.build()?.consume()?;
        }
        Ok(out)
    }

    fn read_ctl(&self) -> Result<Box<xdns_tel_ctl>> {
        let raw = self.ctl.lookup(&0u32.to_ne_bytes(), MapFlags::ANY)?.context("telemetry control value missing")?;
        if raw.len() != std::mem::size_of::<xdns_tel_ctl>() {
            bail!("telemetry control value of {} bytes", raw.len());
        }
        // SAFETY: as in `Rule::encode` (all-zero is a valid value); on the heap (kilobytes).
        let mut c: Box<xdns_tel_ctl> = unsafe { Box::new_zeroed().assume_init() };
        // SAFETY: `c` is plain data of exactly raw.len() bytes.
        unsafe { std::ptr::copy_nonoverlapping(raw.as_ptr(), &mut *c as *mut xdns_tel_ctl as *mut u8, raw.len()) };
        Ok(c)
    }

    /// The control value as the kernel reads it now (tests: the sets and their summaries).
    pub fn ctl(&self) -> Result<Box<xdns_tel_ctl>> {
        self.read_ctl()
    }

    /// Replace the rules (empty: telemetry off, no clock read per packet). The idle set is
    /// written with the active index unchanged, then the index flips: a packet sees one set,
    /// whole, and no program is reloaded.
    pub fn set_rules(&self, rules: &[Rule]) -> Result<()> {
        self.set_rules_tap(rules, false)
    }

    /// As [`Self::set_rules`], and with `dnstap` the kernel answers the rules select (their 1
    /// in N) go to dnstap too: events in `xdns_tel_events` ([`Self::read_events`]).
    pub fn set_rules_tap(&self, rules: &[Rule], dnstap: bool) -> Result<()> {
        self.write_rules(rules, dnstap, |_| {}, true)
    }

    /// Tests only: as [`Self::set_rules`], with the idle set handed to `edit` after it is
    /// compiled (to stage a summary the writer never makes), and the flip left out when `flip`
    /// is false (the new set and its summary written, the old one still active).
    #[doc(hidden)]
    pub fn set_rules_staged(&self, rules: &[Rule], edit: impl FnOnce(&mut xdns_tel_set), flip: bool) -> Result<()> {
        self.write_rules(rules, false, edit, flip)
    }

    /// Write the idle set (the rules, `dnstap`, the rules' summary: one value, `active`
    /// unchanged), then the same value with `active` flipped: the summary flips with its set.
    fn write_rules(&self, rules: &[Rule], dnstap: bool, edit: impl FnOnce(&mut xdns_tel_set), flip: bool) -> Result<()> {
        if rules.len() > MAX_RULES {
            bail!("at most {MAX_RULES} telemetry rules ({} given)", rules.len());
        }
        let mut c = self.read_ctl()?;
        let idle = if c.active == 1 { 1 } else { 0 };
        let set = &mut c.sets[idle];
        // SAFETY: as in `Rule::encode`; written in place (kilobytes: not on the stack).
        unsafe { std::ptr::write_bytes(set as *mut xdns_tel_set, 0, 1) };
        set.nrules = rules.len() as u32;
        set.dnstap = u32::from(dnstap);
        for (slot, r) in set.rules.iter_mut().zip(rules) {
            *slot = r.encode();
        }
        summarize(set);
        edit(set);
        self.ctl.update(&0u32.to_ne_bytes(), bytes_of(&*c), MapFlags::ANY)?;
        if flip {
            c.active = if rules.is_empty() { 0 } else { idle as u32 + 1 };
            self.ctl.update(&0u32.to_ne_bytes(), bytes_of(&*c), MapFlags::ANY)?;
        }
        Ok(())
    }

    /// The kernel paths' histograms and counters, summed over CPUs:
    /// `[kernel_auth, kernel_cache]`.
    pub fn histograms(&self) -> Result<[KernelHist; 2]> {
        let mut out: [KernelHist; 2] = Default::default();
        for (path, o) in out.iter_mut().enumerate() {
            let cpus = self.hist.lookup_percpu(&(path as u32).to_ne_bytes(), MapFlags::ANY)?.unwrap_or_default();
            for raw in cpus {
                if raw.len() < std::mem::size_of::<xdns_tel_hist>() {
                    bail!("telemetry histogram value of {} bytes", raw.len());
                }
                let word = |i: usize| u64::from_ne_bytes(raw[i * 8..i * 8 + 8].try_into().unwrap());
                o.hist.count += word(0);
                o.hist.sum_ns += word(1);
                o.probes += word(2);
                o.probe_bad += word(3);
                o.probe_room += word(4);
                o.rx_ktime += word(5);
                o.dtap_events += word(std::mem::offset_of!(xdns_tel_hist, dtap_events) / 8);
                o.dtap_full += word(std::mem::offset_of!(xdns_tel_hist, dtap_full) / 8);
                o.dtap_long += word(std::mem::offset_of!(xdns_tel_hist, dtap_long) / 8);
                let at = std::mem::offset_of!(xdns_tel_hist, b) / 8;
                for (b, slot) in o.hist.buckets.iter_mut().enumerate() {
                    *slot += word(at + b);
                }
            }
        }
        Ok(out)
    }
}

/// One kernel path's histogram and probe counters.
#[derive(Clone, Debug, Default)]
pub struct KernelHist {
    pub hist: Histogram,
    /// Answers that carried the probe option back.
    pub probes: u64,
    /// Probe options of another length than 0 or 16 (answered without).
    pub probe_bad: u64,
    /// Probes the frame had no room for (answered without).
    pub probe_room: u64,
    /// Answers whose receive time is `bpf_ktime_get_ns` (all of them today: the NIC's
    /// timestamp, `bpf_xdp_metadata_rx_timestamp`, needs a device-bound program).
    pub rx_ktime: u64,
    /// dnstap events written to the ring buffer.
    pub dtap_events: u64,
    /// dnstap events lost: the ring buffer was full (the answer left all the same).
    pub dtap_full: u64,
    /// dnstap events not made: the query or the answer was longer than [`DQ_MAX`], [`DR_MAX`].
    pub dtap_long: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Buckets tile the values: each value is in [lower, upper) of its bucket, buckets are
    /// monotonic, and every bucket from 50 ns to 10 s is at most 1/64 (≈1.6%) of its lower
    /// bound wide (below 64 ns a bucket is one value), so the middle is within 0.8% (the
    /// issue asks ≤ 3%).
    #[test]
    fn bucket_math() {
        let mut prev = 0;
        for v in 0..5000u64 {
            let b = bucket(v);
            assert!(b >= prev);
            prev = b;
        }
        for v in (0..5000u64).chain((12..37).flat_map(|e| [(1u64 << e) - 1, 1 << e, (1 << e) + 1, 3 << (e - 1)])) {
            let b = bucket(v);
            assert!(lower(b) <= v && v < upper(b), "{v} in bucket {b} [{}, {})", lower(b), upper(b));
        }
        for b in 0..BUCKETS - 1 {
            assert_eq!(bucket(lower(b)), b);
            assert_eq!(bucket(upper(b) - 1), b);
            let (lo, hi) = (lower(b), upper(b));
            if (64..=10_000_000_000).contains(&lo) {
                assert!((hi - lo) as f64 / lo as f64 <= 1.0 / 64.0 + 1e-12, "bucket {b}: [{lo}, {hi})");
            }
        }
        assert!(lower(BUCKETS - 1) > 100_000_000_000, "the open bucket starts past 100 s");
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
        assert_eq!(bucket(0), 0);
        assert_eq!(bucket(63), 63);
        assert_eq!(bucket(64), 64);
        assert_eq!(bucket(127), 127);
        assert_eq!(bucket(128), 128);
        assert_eq!(bucket(129), 128);
        assert_eq!(bucket(130), 129);
    }

    /// Quantiles come back within 1% of the true value; cumulative counts are monotonic and
    /// end at the total below the last bound.
    #[test]
    fn quantiles_and_cumulative() {
        let mut h = Histogram::default();
        for v in 1..=10_000u64 {
            h.record(v * 1000); // 1 µs .. 10 ms
        }
        for (q, want) in [(0.5, 5_000_000.0), (0.99, 9_900_000.0), (0.999, 9_990_000.0)] {
            let got = h.quantile(q).unwrap() as f64;
            assert!((got - want).abs() / want < 0.01, "q{q}: {got} vs {want}");
        }
        let bounds = export_bounds();
        let c = h.cumulative(&bounds);
        assert!(c.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(*c.last().unwrap(), 10_000);
        let at_1ms = bounds.iter().position(|&b| b == (1 << 20) - 1).unwrap();
        assert_eq!(c[at_1ms], (1u64 << 20) / 1000);
        assert_eq!(Histogram::default().quantile(0.5), None);
    }

    #[test]
    fn rules_parse_match_and_print() {
        let r = Rule::parse("src=198.18.0.0/15 qname=Example.COM qtype=A path=kernel-auth,user-auth sample=10").unwrap();
        assert_eq!(r.to_string(), "src=198.18.0.0/15 qname=example.com. qtype=A path=kernel-auth,user-auth sample=10");
        let name = |s: &str| xdns_wire::name::from_presentation(s).unwrap();
        let (c, s) = ("198.18.3.4".parse().unwrap(), "198.18.0.1".parse().unwrap());
        assert!(r.matches(KERNEL_AUTH, c, s, &name("www.EXAMPLE.com"), 1));
        assert!(r.matches(USER_AUTH, c, s, &name("example.com"), 1));
        assert!(!r.matches(KERNEL_CACHE, c, s, &name("example.com"), 1));
        assert!(!r.matches(KERNEL_AUTH, c, s, &name("wwwexample.com"), 1));
        assert!(!r.matches(KERNEL_AUTH, c, s, &name("example.com"), 28));
        assert!(!r.matches(KERNEL_AUTH, "198.20.0.1".parse().unwrap(), s, &name("example.com"), 1));
        assert!(!r.matches(KERNEL_AUTH, "2001:db8::2".parse().unwrap(), s, &name("example.com"), 1));
        let all = Rule::parse("all").unwrap();
        assert_eq!(all.to_string(), "all");
        assert!(all.matches(RESOLVER_MISS, "2001:db8::2".parse().unwrap(), "2001:db8::1".parse().unwrap(), &name("x."), 16));
        let e = r.encode();
        assert_eq!((e.src_len, e.family, e.qtype, e.sample, e.sfx_len), (15, 4, 1, 10, 13));
        assert_eq!(e.paths, 0b101);
        for bad in ["src=1.2.3.4/33", "qtype=BOGUS", "path=nowhere", "sample=0", "color=red", "src=1.2.3.0/24 dst=2001:db8::/32", "oops"] {
            assert!(Rule::parse(bad).is_err(), "{bad}");
        }
    }

    /// A set of `rules` (the kernel's form) with its summary compiled.
    fn set_of(rules: &[&str]) -> Box<xdns_tel_set> {
        // SAFETY: plain data, all-zero is valid; on the heap (kilobytes).
        let mut s: Box<xdns_tel_set> = unsafe { Box::new_zeroed().assume_init() };
        s.nrules = rules.len() as u32;
        for (slot, r) in s.rules.iter_mut().zip(rules) {
            *slot = Rule::parse(r).unwrap().encode();
        }
        summarize(&mut s);
        s
    }

    /// Bits set in bitmap `m` (family * 2 + side).
    fn ones(s: &xdns_tel_set, m: usize) -> u32 {
        s.sum.bits[m * SUM_WORDS..(m + 1) * SUM_WORDS].iter().map(|w| w.count_ones()).sum()
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    /// Prefix lengths 0, under the window (12 bits), at it, past it, and past the key's 64
    /// bits (IPv6), on both families and both sides: the bits each sets, the window's end
    /// (`shift`), what is admitted and what is not; a false positive where two addresses share
    /// the window's bits, never a false negative.
    #[test]
    fn summary_by_prefix_length() {
        let (v4s, v6s) = (ip("198.18.0.1"), ip("2001:db8::1"));
        let full = 1 << SUM_BITS;
        // length 0: every bit of the family (both sides), none of the other
        let s = set_of(&["src=0.0.0.0/0"]);
        assert_eq!([ones(&s, 0), ones(&s, 1), ones(&s, 2), ones(&s, 3)], [full, full, 0, 0]);
        assert!(sum_admits(&s.sum, ip("203.0.113.9"), v4s) && !sum_admits(&s.sum, ip("2001:db8::2"), v6s));
        assert_eq!(s.sum.any, 0, "not every bitmap full");
        let s = set_of(&["all"]);
        assert_eq!([ones(&s, 0), ones(&s, 1), ones(&s, 2), ones(&s, 3)], [full; 4]);
        assert_eq!(s.sum.any, 1, "every bitmap full: no check");
        assert_eq!(set_of(&["src=198.19.0.0/16", "qname=example.com"]).sum.any, 1, "a rule of any address");
        assert!(sum_admits(&s.sum, ip("2001:db8::2"), v6s));
        // at the window's width: one bit, the /12 itself
        let s = set_of(&["src=198.16.0.0/12"]);
        assert_eq!((s.sum.shift[0], ones(&s, 0), ones(&s, 1), ones(&s, 2)), (52, 1, full, 0));
        assert!(sum_admits(&s.sum, ip("198.31.0.1"), v4s) && !sum_admits(&s.sum, ip("198.32.0.1"), v4s));
        let s = set_of(&["src=2001::/12"]);
        assert_eq!((s.sum.shift[2], ones(&s, 2)), (52, 1));
        // past it by four bits: the window ends at the /16
        let s = set_of(&["src=198.19.0.0/16"]);
        assert_eq!((s.sum.shift[0], ones(&s, 0), ones(&s, 1), ones(&s, 2)), (48, 1, full, 0));
        assert!(sum_admits(&s.sum, ip("198.19.250.7"), v4s));
        assert!(!sum_admits(&s.sum, ip("198.18.0.2"), v4s) && !sum_admits(&s.sum, ip("198.20.0.2"), v4s));
        assert!(!sum_admits(&s.sum, ip("2001:db8::2"), v6s), "no IPv6 rule: no IPv6 bit");
        // under it: every /12 it covers, the window ending at bit 12
        let s = set_of(&["src=10.0.0.0/8"]);
        assert_eq!((s.sum.shift[0], ones(&s, 0)), (52, 16));
        assert!(sum_admits(&s.sum, ip("10.255.3.4"), v4s) && !sum_admits(&s.sum, ip("11.0.0.1"), v4s) && !sum_admits(&s.sum, ip("9.255.255.255"), v4s));
        let s = set_of(&["src=2000::/3"]);
        assert_eq!((s.sum.shift[2], ones(&s, 2)), (52, 1 << 9));
        assert!(sum_admits(&s.sum, ip("3fff::1"), v6s) && !sum_admits(&s.sum, ip("4000::1"), v6s));
        // past it: the window ends at the prefix, one bit; a shared window is a false positive
        let s = set_of(&["src=198.19.0.128/25"]);
        assert_eq!((s.sum.shift[0], ones(&s, 0)), (64 - 25, 1));
        assert!(sum_admits(&s.sum, ip("198.19.0.200"), v4s));
        assert!(!sum_admits(&s.sum, ip("198.19.0.2"), v4s) && !sum_admits(&s.sum, ip("198.19.1.130"), v4s));
        assert!(sum_admits(&s.sum, ip("199.19.0.130"), v4s) && !set_allows(&s, ip("199.19.0.130"), v4s), "bits 0..12 are outside the window");
        let s = set_of(&["src=2001:db8::/32"]);
        assert_eq!((s.sum.shift[2], ones(&s, 2)), (32, 1));
        assert!(sum_admits(&s.sum, ip("2001:db8:ffff::1"), v6s) && !sum_admits(&s.sum, ip("2001:db9::1"), v6s));
        // past the key's 64 bits: the window ends at 64, the rest is the call's
        let s = set_of(&["src=2001:db8:1:2:3::/80"]);
        assert_eq!((s.sum.shift[2], ones(&s, 2)), (0, 1));
        assert!(sum_admits(&s.sum, ip("2001:db8:1:2:3::9"), v6s) && set_allows(&s, ip("2001:db8:1:2:3::9"), v6s));
        assert!(sum_admits(&s.sum, ip("2001:db8:1:2::9"), v6s) && !set_allows(&s, ip("2001:db8:1:2::9"), v6s));
        assert!(sum_admits(&s.sum, ip("2001:db9:7:2::"), v6s), "only bits 52..63 in the window");
        assert!(!sum_admits(&s.sum, ip("2001:db8:1:3::"), v6s));
        // the server's side, its own window
        let s = set_of(&["dst=198.18.0.9/32"]);
        assert_eq!((s.sum.shift[1], ones(&s, 0), ones(&s, 1)), (32, full, 1));
        assert!(sum_admits(&s.sum, ip("198.18.0.2"), ip("198.18.0.9")) && !sum_admits(&s.sum, ip("198.18.0.2"), v4s));
        let s = set_of(&["dst=2001:db8::1/128"]);
        assert_eq!((s.sum.shift[3], ones(&s, 2), ones(&s, 3)), (0, full, 1));
        assert!(sum_admits(&s.sum, ip("2001:db8::2"), v6s) && !sum_admits(&s.sum, ip("2001:db8::2"), ip("2001:db8:0:1::1")));
        assert!(sum_admits(&s.sum, ip("2001:db8::2"), ip("2001:db9::1")), "another /64 with the same bits 52..63: a false positive");
        // mixed lengths: the window ends at the shortest (at least 12)
        let s = set_of(&["src=10.0.0.0/8", "src=198.19.0.0/24"]);
        assert_eq!((s.sum.shift[0], ones(&s, 0)), (52, 17));
        let s = set_of(&["src=198.19.0.0/24", "src=192.0.2.0/24"]);
        assert_eq!((s.sum.shift[0], ones(&s, 0)), (40, 2));
        assert!(sum_admits(&s.sum, ip("192.0.2.77"), v4s) && !sum_admits(&s.sum, ip("192.0.3.1"), v4s));
        // rules the kernel never applies (userspace paths alone) set nothing
        let s = set_of(&["path=user-auth", "src=198.19.0.0/16 path=resolver-hit"]);
        assert_eq!([ones(&s, 0), ones(&s, 1), ones(&s, 2), ones(&s, 3)], [0; 4]);
        let s = set_of(&["src=198.19.0.0/16 path=kernel-cache,user-auth"]);
        assert_eq!(ones(&s, 0), 1);
    }

    /// Random rule sets (prefixes of every length, both families, both sides, some for
    /// userspace paths) against random addresses, half of them under some rule's prefix: the
    /// summary admits every pair a rule allows (`set_allows`, which agrees with
    /// [`Rule::matches`] on a kernel path); what it admits beyond is the false positives.
    #[test]
    fn summary_never_rules_out_a_match() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let (mut allowed, mut admitted, mut pairs) = (0u64, 0u64, 0u64);
        for _ in 0..3000 {
            let v6 = rnd() % 2 == 1;
            let addr = |r: u64, r2: u64| -> IpAddr {
                if v6 {
                    IpAddr::V6(Ipv6Addr::from((u128::from(r) << 64) | u128::from(r2)))
                } else {
                    IpAddr::V4(Ipv4Addr::from(r as u32))
                }
            };
            let max = if v6 { 128 } else { 32 };
            let mut rules = Vec::new();
            let mut texts = Vec::new();
            for _ in 0..1 + rnd() % 8 {
                let mut t = Vec::new();
                for side in ["src", "dst"] {
                    if rnd() % 3 != 0 {
                        // lengths bunched where the window's edges are
                        let len = [0, 1, 8, 11, 12, 13, 16, 24, 31, 32, 33, 48, 63, 64, 65, 127, 128][(rnd() % 17) as usize].min(max);
                        t.push(format!("{side}={}/{len}", addr(rnd(), rnd())));
                    }
                }
                if rnd() % 5 == 0 {
                    t.push(["path=user-auth", "path=kernel-cache", "path=kernel-auth,resolver-miss"][(rnd() % 3) as usize].to_string());
                }
                let text = if t.is_empty() { "all".to_string() } else { t.join(" ") };
                rules.push(Rule::parse(&text).unwrap());
                texts.push(text);
            }
            let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
            let set = set_of(&refs);
            for _ in 0..40 {
                // half the time under a rule's prefix (its bits, then random ones past them)
                let pick = |p: Option<Prefix>, r: u64, r2: u64, coin: u64| -> IpAddr {
                    match (p, addr(r, r2)) {
                        (Some(p), a) if p.addr.is_ipv4() != v6 && coin.is_multiple_of(2) => {
                            let keep = |bits: u32, w: u32| if bits == 0 { 0 } else { u128::MAX << (w - bits) };
                            match (p.addr, a) {
                                (IpAddr::V4(pa), IpAddr::V4(aa)) => {
                                    let m = keep(u32::from(p.len), 32) as u32;
                                    IpAddr::V4(Ipv4Addr::from((u32::from(pa) & m) | (u32::from(aa) & !m)))
                                }
                                (IpAddr::V6(pa), IpAddr::V6(aa)) => {
                                    let m = keep(u32::from(p.len), 128);
                                    IpAddr::V6(Ipv6Addr::from((u128::from(pa) & m) | (u128::from(aa) & !m)))
                                }
                                (_, a) => a,
                            }
                        }
                        (_, a) => a,
                    }
                };
                let r = &rules[(rnd() % rules.len() as u64) as usize];
                let (client, server) = (pick(r.src, rnd(), rnd(), rnd()), pick(r.dst, rnd(), rnd(), rnd()));
                let by_rule = rules.iter().any(|r| r.matches(KERNEL_AUTH, client, server, &[0], 1) || r.matches(KERNEL_CACHE, client, server, &[0], 1));
                let allows = set_allows(&set, client, server);
                assert_eq!(allows, by_rule, "{texts:?} {client} {server}: the kernel's address check and Rule::matches");
                let admits = sum_admits(&set.sum, client, server);
                assert!(admits || !allows, "{texts:?}: {client} -> {server} allowed by a rule, ruled out by the summary");
                pairs += 1;
                allowed += u64::from(allows);
                admitted += u64::from(admits);
            }
        }
        println!("{pairs} pairs: {allowed} allowed by a rule, {admitted} admitted by the summary");
        assert!(allowed > pairs / 10 && admitted < pairs, "both kinds of pairs drawn: {allowed} allowed, {admitted} admitted of {pairs}");
    }
}
