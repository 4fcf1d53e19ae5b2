//! The recursive side of the daemon: the `[resolver]` section, who may ask, and the route of a
//! query that no served zone covers.
//!
//! A query goes to the resolver when it is a well-formed QUERY for class IN (not a zone
//! transfer) whose name lies under no served zone: names inside served zones are answered
//! authoritatively to everyone, as without a resolver. For those queries:
//! - a client outside `allow` gets REFUSED;
//! - RD=0: REFUSED with RA=1, cached or not: no cache snooping. Unbound does exactly this for
//!   clients under `access-control: allow` (checked in the lab), Knot Resolver too
//!   (`refuse_nord`); the XDP cache stage passes RD=0 to userspace;
//! - a fresh cached answer is sent at once, built with [`xdns_wire::cache::replay`] from the
//!   same [`xdns_wire::CachedAnswer`] the kernel cache replays (so the bytes are the kernel's
//!   but for TTLs), RA=1;
//! - otherwise the query waits for the resolver: UDP workers hand it to a tokio task through a
//!   bounded channel (never blocking), and the answer leaves later from the same socket to the
//!   same address; TCP connections resolve in a task and send when ready. A failed resolution
//!   is answered SERVFAIL (RA=1), with an Extended DNS Error (RFC 8914) when it failed on the
//!   resolver's fetch limits ([`Failure`]);
//! - the UDP queries waiting for the resolver are shared fairly between client prefixes
//!   ([`admit`]): over its share, or with the table full, a query gets SERVFAIL at once.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;
use xdns_resolver::Resolver;
use xdns_wire::response::{error_response, rcode, Limits};
use xdns_wire::{CacheKey, Query, Status};
use xdns_zone::{Outcome, Transport, ZoneSet};

use crate::config::ConfigError;
use crate::stats::Shard;

/// `[resolver]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileResolver {
    root_hints: Spanned<String>,
    allow: Option<Vec<Spanned<String>>>,
    cache_entries: Option<Spanned<i64>>,
    prefetch_percent: Option<Spanned<i64>>,
    prefetch_min_ttl: Option<Spanned<i64>>,
    fanout: Option<Spanned<i64>>,
    fanout_delay_ms: Option<Spanned<i64>>,
    upstream_timeout_ms: Option<Spanned<i64>>,
    resolve_timeout_ms: Option<Spanned<i64>>,
    max_upstream_queries: Option<Spanned<i64>>,
    max_glueless: Option<Spanned<i64>>,
    max_ttl: Option<Spanned<i64>>,
    max_negative_ttl: Option<Spanned<i64>>,
    stale_ttl: Option<Spanned<i64>>,
    stale_answer_after_ms: Option<Spanned<i64>>,
    failure_ttl: Option<Spanned<i64>>,
    upstream_port: Option<Spanned<i64>>,
    ipv4: Option<bool>,
    ipv6: Option<bool>,
    qname_minimisation: Option<bool>,
    forwarders: Option<Vec<Spanned<String>>>,
    max_pending: Option<Spanned<i64>>,
    fetches_per_server: Option<Spanned<i64>>,
    fetches_per_zone: Option<Spanned<i64>>,
    fetches_floor: Option<Spanned<i64>>,
    kernel_iteration: Option<bool>,
    kernel_iteration_ports: Option<Spanned<String>>,
    kernel_iteration_pending: Option<Spanned<i64>>,
}

/// An address prefix of `allow`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Prefix {
    addr: IpAddr,
    len: u8,
}

impl Prefix {
    /// Parses `ADDR/LEN` or a bare address (a host prefix).
    pub fn parse(s: &str) -> Option<Prefix> {
        let s = s.trim();
        let (a, l) = match s.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (s, None),
        };
        let addr: IpAddr = a.parse().ok()?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let len = match l {
            Some(l) => l.parse::<u8>().ok().filter(|&l| l <= max)?,
            None => max,
        };
        Some(Prefix { addr, len })
    }

    /// Address and length.
    pub fn parts(&self) -> (IpAddr, u8) {
        (self.addr, self.len)
    }

    /// True if `ip` lies inside the prefix (IPv4-mapped IPv6 addresses count as IPv4).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
            v4 => v4,
        };
        match (self.addr, ip) {
            (IpAddr::V4(p), IpAddr::V4(a)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(self.len)).unwrap_or(0);
                u32::from(p) & mask == u32::from(a) & mask
            }
            (IpAddr::V6(p), IpAddr::V6(a)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.len))
                    .unwrap_or(0);
                u128::from(p) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }
}

/// The validated `[resolver]` section.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolverSettings {
    /// Root hints file (absolute, or resolved against the configuration's directory).
    pub root_hints: PathBuf,
    /// Clients allowed to recurse.
    pub allow: Vec<Prefix>,
    /// Queries waiting for the resolver (UDP) before new ones get SERVFAIL at once.
    pub max_pending: usize,
    /// The resolver's own settings.
    pub resolver: xdns_resolver::Config,
    /// Cache misses iterated in the kernel (`bpf/kit.h`, issue 32; with `[xdp]` only): as
    /// written, or when unset on without forwarders (the kernel does not forward). A start
    /// that finds a reserved port taken turns an unset one off (`kit_setting` None).
    pub kernel_iteration: bool,
    /// `kernel_iteration` as the file says it (`None`: unset, the default applies).
    pub kit_setting: Option<bool>,
    /// The source ports the daemon reserves for them (inclusive).
    pub kit_ports: (u16, u16),
    /// Queries the kernel may have outstanding (`xdns_kit_pending`'s size).
    pub kit_pending: u32,
}

impl ResolverSettings {
    /// The settings that differ and need a restart (`xdns serve --takeover` applies them
    /// without losing a query): the root hints file, `max_pending`, and the resolver's fixed
    /// settings ([`Resolver::fixed_settings_changed`]). `allow` and the rest apply on reload.
    pub fn restart_fields(&self, other: &ResolverSettings) -> Vec<String> {
        let mut v = Vec::new();
        if self.root_hints != other.root_hints {
            v.push("resolver.root_hints".to_string());
        }
        if self.max_pending != other.max_pending {
            v.push("resolver.max_pending".to_string());
        }
        if self.kit_setting != other.kit_setting {
            v.push("resolver.kernel_iteration".to_string());
        }
        if self.kit_ports != other.kit_ports {
            v.push("resolver.kernel_iteration_ports".to_string());
        }
        if self.kit_pending != other.kit_pending {
            v.push("resolver.kernel_iteration_pending".to_string());
        }
        for f in Resolver::fixed_settings_changed(&self.resolver, &other.resolver) {
            v.push(format!("resolver.{f}"));
        }
        v
    }
}

/// Validates the `[resolver]` section; errors are pushed to `errors`.
pub fn parse_section(
    r: &FileResolver,
    base: &Path,
    err: &dyn Fn(Option<usize>, String) -> ConfigError,
    line: &dyn Fn(std::ops::Range<usize>) -> Option<usize>,
    errors: &mut Vec<ConfigError>,
) -> Option<ResolverSettings> {
    let n_before = errors.len();
    let mut cfg = xdns_resolver::Config::default();
    let raw = Path::new(r.root_hints.get_ref());
    let root_hints = if raw.is_absolute() {
        raw.to_path_buf()
    } else {
        base.join(raw)
    };
    if r.root_hints.get_ref().is_empty() {
        errors.push(err(
            line(r.root_hints.span()),
            "[resolver] root_hints: empty file name".into(),
        ));
    } else if !root_hints.is_file() {
        errors.push(err(
            line(r.root_hints.span()),
            format!(
                "[resolver] root_hints: file {} not found",
                root_hints.display()
            ),
        ));
    }
    let mut allow = Vec::new();
    match &r.allow {
        None => {
            allow.push(Prefix::parse("127.0.0.0/8").expect("prefix"));
            allow.push(Prefix::parse("::1/128").expect("prefix"));
        }
        Some(list) => {
            for a in list {
                match Prefix::parse(a.get_ref()) {
                    Some(p) => allow.push(p),
                    None => errors.push(err(
                        line(a.span()),
                        format!(
                            "[resolver] allow: bad prefix `{}` (expected ADDR/LEN)",
                            a.get_ref()
                        ),
                    )),
                }
            }
        }
    }
    let mut int = |v: &Option<Spanned<i64>>, key: &str, lo: i64, hi: i64| -> Option<i64> {
        let v = v.as_ref()?;
        let x = *v.get_ref();
        if x < lo || x > hi {
            errors.push(err(
                line(v.span()),
                format!("[resolver] {key} {x} out of range {lo}..={hi}"),
            ));
            return None;
        }
        Some(x)
    };
    if let Some(v) = int(&r.cache_entries, "cache_entries", 1, 100_000_000) {
        cfg.cache_entries = v as usize;
    }
    if let Some(v) = int(&r.prefetch_percent, "prefetch_percent", 0, 50) {
        cfg.prefetch_percent = v as u8;
    }
    if let Some(v) = int(&r.prefetch_min_ttl, "prefetch_min_ttl", 0, 86_400) {
        cfg.prefetch_min_ttl = v as u32;
    }
    if let Some(v) = int(&r.fanout, "fanout", 1, 8) {
        cfg.fanout = v as usize;
    }
    if let Some(v) = int(&r.fanout_delay_ms, "fanout_delay_ms", 0, 10_000) {
        cfg.fanout_delay = Duration::from_millis(v as u64);
    }
    if let Some(v) = int(&r.upstream_timeout_ms, "upstream_timeout_ms", 10, 60_000) {
        cfg.upstream_timeout = Duration::from_millis(v as u64);
    }
    if let Some(v) = int(&r.resolve_timeout_ms, "resolve_timeout_ms", 100, 120_000) {
        cfg.resolve_timeout = Duration::from_millis(v as u64);
    }
    if let Some(v) = int(&r.max_upstream_queries, "max_upstream_queries", 1, 1000) {
        cfg.max_queries = v as u32;
    }
    if let Some(v) = int(&r.max_glueless, "max_glueless", 0, 100) {
        cfg.max_glueless = v as u32;
    }
    if let Some(v) = int(&r.max_ttl, "max_ttl", 1, 604_800) {
        cfg.max_ttl = v as u32;
    }
    if let Some(v) = int(&r.max_negative_ttl, "max_negative_ttl", 0, 86_400) {
        cfg.max_negative_ttl = v as u32;
    }
    if let Some(v) = int(&r.stale_ttl, "stale_ttl", 0, 604_800) {
        cfg.stale_ttl = v as u32;
    }
    if let Some(v) = int(
        &r.stale_answer_after_ms,
        "stale_answer_after_ms",
        0,
        120_000,
    ) {
        cfg.stale_answer_after = Duration::from_millis(v as u64);
    }
    if let Some(v) = int(&r.failure_ttl, "failure_ttl", 0, 300) {
        cfg.failure_ttl = v as u32;
    }
    if let Some(v) = int(&r.upstream_port, "upstream_port", 1, 65_535) {
        cfg.upstream_port = v as u16;
    }
    if let Some(v) = int(&r.fetches_per_server, "fetches_per_server", 0, 1_000_000) {
        cfg.fetches_per_server = v as u32;
    }
    if let Some(v) = int(&r.fetches_per_zone, "fetches_per_zone", 0, 1_000_000) {
        cfg.fetches_per_zone = v as u32;
    }
    if let Some(v) = int(&r.fetches_floor, "fetches_floor", 1, 1_000) {
        cfg.fetches_floor = v as u32;
    }
    let max_pending = int(&r.max_pending, "max_pending", 1, 1_000_000).unwrap_or(10_000) as usize;
    let kit_pending = int(&r.kernel_iteration_pending, "kernel_iteration_pending", 1, 1 << 20)
        .map_or(xdns_bpf::kit::KitStage::default().pending, |v| v as u32);
    cfg.ipv4 = r.ipv4.unwrap_or(true);
    cfg.ipv6 = r.ipv6.unwrap_or(true);
    cfg.qname_minimisation = r.qname_minimisation.unwrap_or(cfg.qname_minimisation);
    if !cfg.ipv4 && !cfg.ipv6 {
        errors.push(err(
            None,
            "[resolver] ipv4 and ipv6 are both false: no server can be asked".into(),
        ));
    }
    for f in r.forwarders.iter().flatten() {
        let s = f.get_ref().trim();
        let a = s
            .parse::<SocketAddr>()
            .ok()
            .or_else(|| s.parse::<IpAddr>().ok().map(|ip| SocketAddr::new(ip, 53)));
        match a {
            Some(a) => cfg.forwarders.push(a),
            None => errors.push(err(
                line(f.span()),
                format!("[resolver] forwarders: bad address `{s}` (expected IP or IP:PORT)"),
            )),
        }
    }
    // unset: on without forwarders (with `[xdp]` interfaces only, as when set: see
    // crate::server); with forwarders silently off, since the kernel does not forward
    let kernel_iteration = r.kernel_iteration.unwrap_or(cfg.forwarders.is_empty());
    let mut kit_ports = xdns_bpf::kit::KitStage::default().ports;
    if let Some(p) = &r.kernel_iteration_ports {
        match xdns_bpf::kit::parse_ports(p.get_ref()) {
            Ok(range) => kit_ports = range,
            Err(why) => errors.push(err(line(p.span()), format!("[resolver] kernel_iteration_ports: {why}"))),
        }
    }
    if kernel_iteration && !cfg.forwarders.is_empty() {
        errors.push(err(None, "[resolver] kernel_iteration with forwarders: the kernel iterates, it does not forward".into()));
    }
    if errors.len() > n_before {
        return None;
    }
    Some(ResolverSettings {
        root_hints,
        allow,
        max_pending,
        resolver: cfg,
        kernel_iteration,
        kit_setting: r.kernel_iteration,
        kit_ports,
        kit_pending,
    })
}

/// The resolver as the server uses it.
pub struct Recursion {
    /// The resolver.
    pub resolver: Arc<Resolver>,
    /// Clients allowed to recurse (replaced on reload).
    pub allow: arc_swap::ArcSwap<Vec<Prefix>>,
    /// Where UDP workers hand queries that must wait for a resolution.
    pub pending: tokio::sync::mpsc::Sender<crate::server::udp::Pending>,
    /// Counters of answers sent by resolver tasks.
    pub shard: Arc<Shard>,
}

impl Recursion {
    /// True if `ip` may recurse.
    pub fn allowed(&self, ip: IpAddr) -> bool {
        self.allow.load().iter().any(|p| p.contains(ip))
    }

    /// The resolver's counters, its cache's size and the kernel cache's, into `s` (the
    /// `resolver` group).
    pub fn snapshot(&self, s: &mut crate::stats::Snapshot) {
        let r = &self.resolver;
        let mut values: Vec<(String, u64)> = r.counters.snapshot().into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        values.push(("cache_entries".into(), r.cache_len() as u64));
        values.extend(r.fetch_gauges().into_iter().map(|(k, v)| (k.to_string(), v)));
        values.extend(r.kernel_cache_stats().into_iter().map(|(k, v)| (k.to_string(), v)));
        s.groups.insert(
            "resolver".into(),
            crate::stats::Group::counters(
                "Resolver counters (cache hits/misses, upstream queries, timeouts, SERVFAILs, ...).",
                "counter",
                values,
            ),
        );
    }
}

/// Where a message goes.
pub enum Route {
    /// To the authoritative engine (`xdns_zone::respond`), as without a resolver.
    Authoritative,
    /// Answered here; the response is in `out`.
    Answered(Outcome),
    /// Must wait for the resolver.
    Resolve(Box<Query>, CacheKey),
}

/// Decides the route of `msg` from `peer`; writes the answer into `out` when it can be given
/// at once (REFUSED, a cache hit).
pub fn route(
    rec: &Recursion,
    zones: &ZoneSet,
    msg: &[u8],
    peer: IpAddr,
    transport: Transport,
    edns_payload: u16,
    out: &mut Vec<u8>,
) -> Route {
    let Ok(q) = Query::parse(msg) else {
        return Route::Authoritative;
    };
    if q.status != Status::Ok || q.edns.is_some_and(|e| e.version > 0) {
        return Route::Authoritative;
    }
    let Some(qq) = q.question.as_ref() else {
        return Route::Authoritative;
    };
    // IN only; zone transfers (AXFR 252, IXFR 251) and meta types stay with the engine.
    if qq.qclass != 1 || matches!(qq.qtype, 251 | 252) || zones.find(qq.key()).is_some() {
        return Route::Authoritative;
    }
    let qtype = qq.qtype;
    if !rec.allowed(peer) {
        let rc = error_response(&q, rcode::REFUSED, edns_payload, out);
        return Route::Answered(Outcome::Answered {
            rcode: rc,
            qtype,
            truncated: false,
        });
    }
    if !q.rd {
        let rc = error_response(&q, rcode::REFUSED, edns_payload, out);
        if out.len() > 3 {
            out[3] |= 0x80; // RA, as Unbound sends it
        }
        return Route::Answered(Outcome::Answered {
            rcode: rc,
            qtype,
            truncated: false,
        });
    }
    let key = xdns_resolver::KeyRef {
        qname: qq.key(),
        qtype,
        dnssec_ok: q.edns.is_some_and(|e| e.dnssec_ok),
    };
    if let Some(a) = rec.resolver.cached_ref(&key) {
        let outcome = answer(
            &q,
            Ok(&a),
            rec.resolver.now_ns(),
            transport,
            edns_payload,
            out,
        );
        return Route::Answered(outcome);
    }
    let key = key.to_owned_key();
    Route::Resolve(Box::new(q), key)
}

/// Why a query is answered SERVFAIL, and the Extended DNS Error (RFC 8914) it carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// The resolution failed (servers silent or lame, time or work limit, cached failure):
    /// no EDE.
    Resolution,
    /// Every server of the zone (or the zone) had its bound of upstream queries outstanding
    /// (`fetches_per_server`, `fetches_per_zone`): EDE 22 "No Reachable Authority" — the
    /// authorities could not be reached within the resolver's quota for them, nearly always
    /// because they stopped answering — with the EXTRA-TEXT "upstream quota".
    Quota,
    /// The client's address prefix held more than its share of the pending resolutions
    /// while others waited: EDE 0 "Other" (RFC 8914 has no code for a resolver's own
    /// load; "Other" SHOULD carry an EXTRA-TEXT), "client over its share".
    ClientShare,
    /// The pending resolutions were at `max_pending`: EDE 0 "Other", "resolver busy".
    Busy,
}

impl Failure {
    /// The INFO-CODE and EXTRA-TEXT of its Extended DNS Error.
    pub fn ede(self) -> Option<(u16, &'static str)> {
        match self {
            Failure::Resolution => None,
            Failure::Quota => Some((22, "upstream quota")),
            Failure::ClientShare => Some((0, "client over its share")),
            Failure::Busy => Some((0, "resolver busy")),
        }
    }

    /// The failure of a resolution error.
    pub fn of(e: xdns_resolver::ResolveError) -> Failure {
        match e {
            xdns_resolver::ResolveError::Quota => Failure::Quota,
            _ => Failure::Resolution,
        }
    }
}

/// Appends an Extended DNS Error option (RFC 8914 §2: OPTION-CODE 15, INFO-CODE, EXTRA-TEXT
/// in UTF-8, not NUL-terminated) to the OPT record that ends `out`, a response whose last
/// record is its OPT; nothing when the query had no EDNS (no OPT to carry it).
fn push_ede(q: &Query, code: u16, text: &str, out: &mut Vec<u8>) {
    // The OPT record ends the message: its RDLENGTH is the last two bytes written.
    if q.edns.is_none() || out.len() < 12 + 11 {
        return;
    }
    let at = out.len() - 2;
    let rdlen = u16::from_be_bytes([out[at], out[at + 1]]);
    if rdlen != 0 {
        return; // not the empty OPT error_response writes: leave it alone
    }
    let len = 2 + text.len() as u16;
    out.extend_from_slice(&15u16.to_be_bytes());
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&code.to_be_bytes());
    out.extend_from_slice(text.as_bytes());
    out[at..at + 2].copy_from_slice(&(4 + len).to_be_bytes());
}

/// Writes the reply to `q` from a resolution result into `out`: the replayed answer, or
/// SERVFAIL with the failure's Extended DNS Error when the client sent EDNS. RA=1 either way.
pub fn answer(
    q: &Query,
    r: Result<&xdns_wire::CachedAnswer, Failure>,
    now_ns: u64,
    transport: Transport,
    edns_payload: u16,
    out: &mut Vec<u8>,
) -> Outcome {
    let qtype = q.question.as_ref().map_or(0, |qq| qq.qtype);
    let limits = match transport {
        Transport::Udp => Limits::udp(q.edns.as_ref(), edns_payload),
        Transport::Tcp => Limits::tcp(edns_payload),
    };
    let failure = match r {
        Ok(a) => {
            // The kernel's bytes (xdns_wire::cache::replay), built in the caller's buffer.
            if let Ok(x) = xdns_wire::cache::replay_into(a, q, now_ns, &limits, out) {
                return Outcome::Answered {
                    rcode: x.rcode,
                    qtype,
                    truncated: x.truncated,
                };
            }
            Failure::Resolution
        }
        Err(f) => f,
    };
    let rc = error_response(q, rcode::SERVFAIL, edns_payload, out);
    if out.len() > 3 {
        out[3] |= 0x80;
    }
    if let Some((code, text)) = failure.ede() {
        push_ede(q, code, text, out);
    }
    Outcome::Answered {
        rcode: rc,
        qtype,
        truncated: false,
    }
}

/// Resolves `key` for `q` and writes the reply into a new buffer (SERVFAIL on failure).
/// With `handed`, the reply kernel iteration got for it is the first exchange's
/// ([`xdns_resolver::Resolver::resolve_handed`]; what became of it is counted by
/// `crate::kit`).
pub async fn resolve_and_answer(
    rec: &Arc<Recursion>,
    q: &Query,
    key: CacheKey,
    transport: Transport,
    edns_payload: u16,
    handed: Option<xdns_resolver::Handed>,
) -> (Vec<u8>, Outcome) {
    let r = match handed {
        Some(h) => {
            let (r, used) = rec.resolver.resolve_handed(key, h).await;
            crate::kit::note_use(used);
            r
        }
        None => rec.resolver.resolve(key).await,
    };
    answer_resolution(rec, q, r, transport, edns_payload)
}

/// [`resolve_and_answer`] for a reply kernel iteration handed over, the resolution run in
/// this future ([`xdns_resolver::Resolver::resolve_handed_inline`]): a final answer is
/// ready at the first poll. The caller drives it to its end (`crate::kit`'s ring reader).
pub async fn resolve_handed_and_answer(
    rec: &Arc<Recursion>,
    q: &Query,
    key: CacheKey,
    edns_payload: u16,
    handed: xdns_resolver::Handed,
) -> (Vec<u8>, Outcome) {
    let (r, used) = rec.resolver.resolve_handed_inline(key, handed).await;
    crate::kit::note_use(used);
    answer_resolution(rec, q, r, Transport::Udp, edns_payload)
}

/// The reply to `q` from a resolution's result (SERVFAIL counted on failure).
fn answer_resolution(
    rec: &Arc<Recursion>,
    q: &Query,
    r: Result<Arc<xdns_wire::CachedAnswer>, xdns_resolver::ResolveError>,
    transport: Transport,
    edns_payload: u16,
) -> (Vec<u8>, Outcome) {
    let mut out = Vec::new();
    let outcome = match &r {
        Ok(a) => answer(
            q,
            Ok(a),
            rec.resolver.now_ns(),
            transport,
            edns_payload,
            &mut out,
        ),
        Err(e) => {
            rec.resolver
                .counters
                .servfails
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            answer(q, Err(Failure::of(*e)), 0, transport, edns_payload, &mut out)
        }
    };
    (out, outcome)
}

/// Client addresses counted together by the fairness rule: IPv4 /24, IPv6 /56 (the
/// prefixes one customer or site usually holds; BIND's rate limiting groups clients the
/// same way by default).
pub const CLIENT_PREFIX_V4: u32 = 24;
/// See [`CLIENT_PREFIX_V4`].
pub const CLIENT_PREFIX_V6: u32 = 56;

/// The prefix of `ip` that the fairness rule counts (IPv4-mapped IPv6 as IPv4).
fn client_key(ip: Option<IpAddr>) -> ClientKey {
    let ip = ip?;
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    };
    Some(match ip {
        IpAddr::V4(a) => (false, u128::from(u32::from(a) & (u32::MAX << (32 - CLIENT_PREFIX_V4)))),
        IpAddr::V6(a) => (true, u128::from(a) & (u128::MAX << (128 - CLIENT_PREFIX_V6))),
    })
}

/// The fairness rule for one more pending resolution: `max` may be pending at once;
/// `total` are, `mine` of them from this client's prefix, and `others` other prefixes have
/// at least one each.
/// - `total` at `max`: refused ([`Failure::Busy`]);
/// - a prefix never holds half of `max` or more (the other half is kept for everyone else);
/// - once half of `max` is pending (contention), a prefix holding its share, `max` divided
///   by the prefixes waiting (its own included), gets no more ([`Failure::ClientShare`]);
///   below half, any prefix under the half may take more.
///
/// Nothing already pending is cut short: a prefix above its share (others came after it)
/// keeps what it has, and gets no more until it is below.
pub fn admit(max: usize, total: usize, mine: usize, others: usize) -> Result<(), Failure> {
    let max = max.max(1);
    if total >= max {
        return Err(Failure::Busy);
    }
    let half = (max / 2).max(1);
    let share = (max / (others + 1)).max(1);
    if mine >= half || (total >= half && mine >= share) {
        return Err(Failure::ClientShare);
    }
    Ok(())
}

/// A client prefix as counted ([`client_key`]); `None`: address unknown.
type ClientKey = Option<(bool, u128)>;

/// Pending resolutions per client prefix ([`admit`]): the total, and the count of each prefix
/// with at least one.
struct Fairness {
    max: usize,
    state: std::sync::Mutex<(usize, std::collections::HashMap<ClientKey, usize>)>,
}

/// One pending resolution's place; given back when dropped.
struct FairSlot {
    fair: Arc<Fairness>,
    key: ClientKey,
}

impl Fairness {
    fn take(self: &Arc<Self>, peer: Option<IpAddr>) -> Result<FairSlot, Failure> {
        let key = client_key(peer);
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let mine = st.1.get(&key).copied().unwrap_or(0);
        let others = st.1.len() - usize::from(mine > 0);
        admit(self.max, st.0, mine, others)?;
        st.0 += 1;
        *st.1.entry(key).or_insert(0) += 1;
        Ok(FairSlot { fair: self.clone(), key })
    }
}

impl Drop for FairSlot {
    fn drop(&mut self) {
        let mut st = self.fair.state.lock().unwrap_or_else(|e| e.into_inner());
        st.0 = st.0.saturating_sub(1);
        if let Some(n) = st.1.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                st.1.remove(&self.key);
            }
        }
    }
}

/// Answers the UDP queries the workers queued, each in a task of its own, at most `max`
/// at a time and shared fairly between client prefixes ([`admit`]): a query over its
/// client's share, or beyond `max`, is answered SERVFAIL at once (with an Extended DNS
/// Error) instead of waiting, so this loop never blocks and the workers' queue stays short.
pub async fn serve_udp_pending(
    mut rx: tokio::sync::mpsc::Receiver<crate::server::udp::Pending>,
    shared: Arc<crate::server::Shared>,
    rec: Arc<Recursion>,
    mut stop: tokio::sync::watch::Receiver<bool>,
    max: usize,
) {
    use std::sync::atomic::Ordering::Relaxed;
    let fair = Arc::new(Fairness {
        max: max.max(1),
        state: Default::default(),
    });
    loop {
        let mut p = tokio::select! {
            _ = crate::server::stopped(&mut stop) => break,
            p = rx.recv() => match p { Some(p) => p, None => break },
        };
        let permit = match fair.take(p.peer()) {
            Ok(slot) => slot,
            Err(f) => {
                let c = &rec.resolver.counters;
                c.servfails.fetch_add(1, Relaxed);
                match f {
                    Failure::Busy => c.pending_full_servfails.fetch_add(1, Relaxed),
                    _ => c.client_share_servfails.fetch_add(1, Relaxed),
                };
                let payload = shared.served.load().respond.edns_payload;
                let mut out = Vec::new();
                let outcome = answer(&p.query, Err(f), 0, Transport::Udp, payload, &mut out);
                rec.shard.record(Transport::Udp, outcome);
                if p.send(&mut out).is_err() {
                    Shard::drop(&rec.shard, crate::stats::DropKind::SendFailed);
                }
                continue;
            }
        };
        let rec = rec.clone();
        let shared = shared.clone();
        tokio::spawn(async move {
            let mut p = p;
            let payload = shared.served.load().respond.edns_payload;
            let (mut out, outcome) =
                resolve_and_answer(&rec, &p.query, p.key.clone(), Transport::Udp, payload, p.handed.take()).await;
            rec.shard.record(Transport::Udp, outcome);
            if let Some(t) = p.timed.take() {
                shared.telemetry.finish(t, &mut out);
            }
            if p.send(&mut out).is_err() {
                Shard::drop(&rec.shard, crate::stats::DropKind::SendFailed);
            }
            drop(permit);
        });
    }
}

/// Raises the soft limit of open files to the hard limit: every upstream query has a socket of
/// its own, so thousands of concurrent resolutions need thousands of descriptors (the usual
/// soft limit is 1024). Returns the limit now in force.
pub fn raise_nofile_limit() -> u64 {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: valid pointer to an rlimit for the duration of the call.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } != 0 {
        return 0;
    }
    if r.rlim_cur < r.rlim_max {
        let want = libc::rlimit {
            rlim_cur: r.rlim_max,
            rlim_max: r.rlim_max,
        };
        // SAFETY: as above; raising the soft limit up to the hard one needs no privilege.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &want) } == 0 {
            return want.rlim_cur;
        }
    }
    r.rlim_cur
}

/// Builds the resolver from the `[resolver]` settings (blocking: reads the root hints); its
/// upstream exchanges are timed by `upstream` (telemetry's, when rules select them).
pub fn build_resolver(
    rs: &ResolverSettings,
    kernel: Arc<dyn xdns_wire::AnswerCache>,
    upstream: Arc<crate::telemetry::Upstream>,
) -> anyhow::Result<Arc<Resolver>> {
    let hints = xdns_resolver::RootHints::load(&rs.root_hints).map_err(|errs| {
        let lines: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
        anyhow::anyhow!("{}", lines.join("\n"))
    })?;
    let res = Resolver::new(
        rs.resolver.clone(),
        &hints,
        // dnstap logs each exchange, telemetry times the ones its rules select
        Arc::new(crate::dnstap::Tapped(crate::telemetry::TimedNetwork(xdns_resolver::SystemNetwork, upstream))),
        kernel,
        xdns_resolver::Clock::Monotonic,
    );
    // Root priming (RFC 8109) at start, in the background: questions that come meanwhile wait
    // for it, and it logs one line. Called on a blocking thread of the runtime, or elsewhere
    // (then the first question primes).
    if let Ok(rt) = tokio::runtime::Handle::try_current() {
        let r = res.clone();
        rt.spawn(async move { r.prime_when_due().await });
    }
    Ok(res)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes() {
        let table: &[(&str, &str, bool)] = &[
            ("198.18.0.0/15", "198.19.255.1", true),
            ("198.18.0.0/15", "198.20.0.1", false),
            ("198.18.0.0/15", "::ffff:198.18.0.1", true),
            ("127.0.0.1", "127.0.0.1", true),
            ("127.0.0.1", "127.0.0.2", false),
            ("0.0.0.0/0", "8.8.8.8", true),
            ("::/0", "2001:db8::1", true),
            ("::/0", "10.0.0.1", false),
            ("2001:db8::/32", "2001:db8:1::1", true),
            ("2001:db8::/32", "2001:db9::1", false),
        ];
        for (p, ip, want) in table {
            let pre = Prefix::parse(p).unwrap();
            assert_eq!(pre.contains(ip.parse().unwrap()), *want, "{p} {ip}");
        }
        for bad in ["x", "10.0.0.0/33", "::/129", "10.0.0.0/", ""] {
            assert!(Prefix::parse(bad).is_none(), "{bad}");
        }
    }

    /// The fetch limit keys of `[resolver]`: defaults, values, `file:line: reason` errors.
    #[test]
    fn fetch_limit_keys() {
        use crate::config::{parse, Overrides};
        let d = std::env::temp_dir().join(format!("xdns-fetch-keys-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("root.hints"), ". 3600000 NS a.root.\na.root. 3600000 A 192.0.2.1\n").unwrap();
        let file = d.join("xdns.toml");
        let head = "[resolver]\nroot_hints = \"root.hints\"\n";
        let get = |extra: &str| {
            parse(&format!("{head}{extra}"), &file, &Overrides::default()).map(|c| c.resolver.unwrap().resolver)
        };
        let def = get("").unwrap();
        assert_eq!((def.fetches_per_server, def.fetches_per_zone, def.fetches_floor), (1000, 500, 2));
        let set = get("fetches_per_server = 0\nfetches_per_zone = 40\nfetches_floor = 5\n").unwrap();
        assert_eq!((set.fetches_per_server, set.fetches_per_zone, set.fetches_floor), (0, 40, 5));
        for (extra, line, key) in [
            ("fetches_per_server = -1\n", 3, "fetches_per_server"),
            ("\nfetches_per_zone = 2000000\n", 4, "fetches_per_zone"),
            ("fetches_floor = 0\n", 3, "fetches_floor"),
        ] {
            let errs = get(extra).expect_err(extra);
            assert_eq!(errs[0].line, Some(line), "{extra}: {}", errs[0]);
            assert!(errs[0].reason.contains(key), "{}", errs[0]);
        }
        let _ = std::fs::remove_dir_all(&d);
    }

    /// `kernel_iteration` unset: on without forwarders, silently off with them; set, as set
    /// (`true` with forwarders an error); a change of the setting as written needs a restart.
    #[test]
    fn kernel_iteration_default() {
        use crate::config::{parse, Overrides};
        let d = std::env::temp_dir().join(format!("xdns-kit-default-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("root.hints"), ". 3600000 NS a.root.\na.root. 3600000 A 192.0.2.1\n").unwrap();
        let file = d.join("xdns.toml");
        let head = "[resolver]\nroot_hints = \"root.hints\"\n";
        let get = |extra: &str| parse(&format!("{head}{extra}"), &file, &Overrides::default()).map(|c| c.resolver.unwrap());
        let fwd = "forwarders = [\"192.0.2.53\"]\n";
        let on = get("").unwrap();
        assert_eq!((on.kernel_iteration, on.kit_setting), (true, None), "unset, no forwarders: on");
        let off = get(fwd).unwrap();
        assert_eq!((off.kernel_iteration, off.kit_setting), (false, None), "unset, forwarders: off, no error");
        let set_off = get("kernel_iteration = false\n").unwrap();
        assert_eq!((set_off.kernel_iteration, set_off.kit_setting), (false, Some(false)));
        let set_on = get("kernel_iteration = true\n").unwrap();
        assert_eq!((set_on.kernel_iteration, set_on.kit_setting), (true, Some(true)));
        let errs = get(&format!("kernel_iteration = true\n{fwd}")).expect_err("true with forwarders");
        assert!(errs[0].reason.contains("kernel_iteration with forwarders"), "{}", errs[0]);
        assert_eq!(on.restart_fields(&set_on), vec!["resolver.kernel_iteration"], "written out now: a restart");
        assert!(on.restart_fields(&on).is_empty());
        let _ = std::fs::remove_dir_all(&d);
    }

    /// The fairness rule: (max, total pending, this prefix's, other prefixes waiting) → verdict.
    #[test]
    fn fairness_rule_table() {
        use Failure::*;
        let table: &[(usize, usize, usize, usize, Result<(), Failure>)] = &[
            // alone and below half: anything under half of max
            (100, 0, 0, 0, Ok(())),
            (100, 49, 49, 0, Ok(())),
            // a prefix never takes half
            (100, 50, 50, 0, Err(ClientShare)),
            // under contention (half pending), the share is max / prefixes waiting
            (100, 60, 45, 2, Err(ClientShare)),
            (100, 60, 45, 1, Ok(())),
            (100, 60, 10, 1, Ok(())),
            // a newcomer (nothing pending) is let in while there is room, however many wait
            (100, 99, 0, 40, Ok(())),
            // below half, a prefix over its share may still take more (no contention)
            (100, 40, 30, 3, Ok(())),
            // at half, it may not
            (100, 50, 30, 3, Err(ClientShare)),
            (100, 50, 24, 3, Ok(())),
            // full: nobody
            (100, 100, 0, 5, Err(Busy)),
            (100, 100, 0, 0, Err(Busy)),
            // tiny tables stay usable
            (1, 0, 0, 0, Ok(())),
            (1, 1, 1, 0, Err(Busy)),
            (2, 1, 1, 0, Err(ClientShare)),
            (2, 1, 0, 1, Ok(())),
        ];
        for &(max, total, mine, others, want) in table {
            assert_eq!(admit(max, total, mine, others), want, "{max} {total} {mine} {others}");
        }
    }

    /// A flooding prefix against one that asks now and then, through the table itself: the
    /// flood is held to half of `max`, the other client is always let in.
    #[test]
    fn fairness_table_keeps_room_for_others() {
        let fair = Arc::new(Fairness { max: 100, state: Default::default() });
        let flooder: IpAddr = "198.18.5.7".parse().unwrap();
        let same_24: IpAddr = "198.18.5.200".parse().unwrap();
        let other: IpAddr = "198.18.6.1".parse().unwrap();
        let mut held = Vec::new();
        let mut refused = 0;
        for i in 0..1000 {
            let ip = if i % 2 == 0 { flooder } else { same_24 };
            match fair.take(Some(ip)) {
                Ok(s) => held.push(s),
                Err(f) => {
                    assert_eq!(f, Failure::ClientShare);
                    refused += 1;
                }
            }
        }
        assert_eq!((held.len(), refused), (50, 950));
        let mut others = Vec::new();
        for _ in 0..40 {
            others.push(fair.take(Some(other)).expect("room for another prefix"));
        }
        // the IPv4-mapped form of an address is the same client
        let mapped: IpAddr = "::ffff:198.18.5.9".parse().unwrap();
        assert_eq!(fair.take(Some(mapped)).err(), Some(Failure::ClientShare));
        drop(held);
        drop(others);
        assert_eq!(fair.state.lock().unwrap().0, 0);
        assert!(fair.state.lock().unwrap().1.is_empty());
        assert_eq!(client_key(Some("2001:db8:1:ff::1".parse().unwrap())),
                   client_key(Some("2001:db8:1:0::2".parse().unwrap())));
        assert_ne!(client_key(Some("2001:db8:1:100::1".parse().unwrap())),
                   client_key(Some("2001:db8:1:0::2".parse().unwrap())));
    }

    /// `www.example.org A`, RD, ID 0xbeef, with an OPT (payload 1232, DO clear) when `edns`.
    fn query_wire(edns: bool) -> Vec<u8> {
        let mut m = vec![0xbe, 0xef, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, u8::from(edns)];
        m.extend_from_slice(b"\x03www\x07example\x03org\x00\x00\x01\x00\x01");
        if edns {
            m.extend_from_slice(&[0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0, 0, 0]);
        }
        m
    }

    /// The bytes of SERVFAIL answers with and without an Extended DNS Error.
    #[test]
    fn servfail_ede_bytes() {
        let head = |arcount: u8| {
            let mut h = vec![0xbe, 0xef, 0x81, 0x82, 0, 1, 0, 0, 0, 0, 0, arcount];
            h.extend_from_slice(b"\x03www\x07example\x03org\x00\x00\x01\x00\x01");
            h
        };
        // OPT: root, type 41, our payload 1232, ext-rcode/version/flags 0, then RDLENGTH.
        let opt = |rdata: &[u8]| {
            let mut o = vec![0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0];
            o.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
            o.extend_from_slice(rdata);
            o
        };
        let with = |rdata: &[u8]| [head(1), opt(rdata)].concat();
        let ede = |code: u16, text: &str| {
            let mut v = vec![0, 15];
            v.extend_from_slice(&(2 + text.len() as u16).to_be_bytes());
            v.extend_from_slice(&code.to_be_bytes());
            v.extend_from_slice(text.as_bytes());
            v
        };
        let table: &[(bool, Failure, Vec<u8>)] = &[
            (true, Failure::Quota, with(&ede(22, "upstream quota"))),
            (true, Failure::ClientShare, with(&ede(0, "client over its share"))),
            (true, Failure::Busy, with(&ede(0, "resolver busy"))),
            (true, Failure::Resolution, with(&[])),
            // no EDNS in the query: no OPT, so no EDE
            (false, Failure::Quota, head(0)),
            (false, Failure::Busy, head(0)),
        ];
        for (edns, f, want) in table {
            let wire = query_wire(*edns);
            let q = Query::parse(&wire).unwrap();
            for t in [Transport::Udp, Transport::Tcp] {
                let mut out = vec![0xaa; 7];
                let o = answer(&q, Err(*f), 0, t, 1232, &mut out);
                assert!(matches!(o, Outcome::Answered { rcode: 2, qtype: 1, truncated: false }), "{o:?}");
                assert_eq!(&out, want, "{f:?} edns={edns}");
            }
            // 22 spelled out once: 0x000f option, length 16, INFO-CODE 0x0016
            if *edns && *f == Failure::Quota {
                let tail = &want[want.len() - 20..];
                assert_eq!(&tail[..6], &[0x00, 0x0f, 0x00, 0x10, 0x00, 0x16]);
            }
        }
    }
}
