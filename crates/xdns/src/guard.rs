//! The `[guard]` section in userspace: the first and last steps of the query plan
//! (`crate::query`), with the decisions of `xdns_guard`.
//!
//! - **Lists** (`blocklist`, `allowlist`, `block_names`): files of prefixes and names,
//!   checked by `xdns check` (`FILE:LINE: reason`) and replaced atomically on SIGHUP (a list
//!   that fails keeps the old one). A message from a blocked source, or for a blocked name,
//!   gets no answer (`dropped.blocked`); an allowlisted source is never blocked nor limited.
//! - **Cookies** (RFC 7873, server cookies of RFC 9018): a query with a client cookie gets
//!   the server's cookie back in its answer; a malformed COOKIE option gets FORMERR; a valid
//!   server cookie proves the client's address, and such a client bypasses RRL. The secret is
//!   drawn at start, kept across reloads, and rotated every `cookie_secret_lifetime` (26 h,
//!   Knot's default): the previous secret keeps verifying until the next rotation (RFC 9018
//!   §4.3), in userspace and in the kernel alike, so a cookie outlives one rotation, not two.
//! - **RRL** (`rrl = { rate, slip, ipv4_prefix, ipv6_prefix }`): UDP answers per client
//!   prefix and response class over `rate` per second are dropped (`dropped.rate_limited`),
//!   every `slip`-th of them sent truncated (TC=1, the question only) so that a real
//!   resolver retries over TCP, which RRL never limits (Knot DNS's and BIND's semantics).
//!
//! The kernel applies the same lists before any DNS stage when XDP is on (bpf/guard.h);
//! this is the whole guard without XDP, and the guard of what the kernel passes on.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

use serde::Deserialize;
use toml::Spanned;
use xdns_guard::cookies::{parse_opt_cookie, CookieSecrets};
use xdns_guard::lists::{NameList, PrefixList};
use xdns_guard::rrl::{Decision, ResponseClass, Rrl, RrlConfig};

use crate::config::ConfigError;
use crate::stats::{Group, Snapshot};

/// `[guard]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileGuard {
    blocklist: Option<Spanned<String>>,
    allowlist: Option<Spanned<String>>,
    block_names: Option<Spanned<String>>,
    rrl: Option<Spanned<FileRrl>>,
    cookies: Option<bool>,
    cookie_secret_lifetime: Option<Spanned<String>>,
    detect: Option<bool>,
    detect_interval_ms: Option<Spanned<u32>>,
    detect_min_rate: Option<Spanned<u32>>,
    detect_unblock_after: Option<Spanned<u32>>,
    detect_block_for: Option<Spanned<String>>,
    offload_slots: Option<Spanned<u32>>,
}

/// `rrl = { ... }` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileRrl {
    rate: Option<u32>,
    slip: Option<u32>,
    ipv4_prefix: Option<u8>,
    ipv6_prefix: Option<u8>,
}

/// The validated `[guard]` section: where the lists are, and the settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GuardSettings {
    pub blocklist: Option<PathBuf>,
    pub allowlist: Option<PathBuf>,
    pub block_names: Option<PathBuf>,
    /// `(rate, slip, ipv4_prefix, ipv6_prefix)`; `None`: no RRL.
    pub rrl: Option<(u32, u32, u8, u8)>,
    pub cookies: bool,
    /// `cookie_secret_lifetime`: seconds between rotations of the server cookie secret
    /// (`None`: never rotated).
    pub cookie_secret_lifetime: Option<u64>,
    /// `detect = true`: the detection loop (`crate::detect`); `None` = off.
    pub detect: Option<DetectSettings>,
    /// `offload_slots`: size of the hardware tier (0 = none).
    pub offload_slots: u32,
}

/// The detection keys of `[guard]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DetectSettings {
    /// Length of a feature interval, ms (100..=1000).
    pub interval_ms: u32,
    /// Floor of the per-source threshold, packets/s.
    pub min_rate: u32,
    /// Calm intervals before a detected block is lifted.
    pub unblock_after: u32,
    /// Expiry of a detected block, seconds (`None`: only the rate monitor lifts it).
    pub block_for: Option<u64>,
}

impl Default for DetectSettings {
    fn default() -> Self {
        Self { interval_ms: 500, min_rate: 200, unblock_after: 5, block_for: Some(3600) }
    }
}

/// Seconds between rotations of the server cookie secret by default: Knot DNS's
/// `secret-lifetime` (mod-cookies).
pub const DEFAULT_COOKIE_SECRET_LIFETIME: u64 = 26 * 3600;

/// Validate `[guard]` (paths relative to `base`, the configuration's directory); the list
/// files are read by [`Guard::load`].
pub fn settings(
    file: FileGuard,
    base: &Path,
    err: &dyn Fn(Option<usize>, String) -> ConfigError,
    line: &dyn Fn(std::ops::Range<usize>) -> Option<usize>,
    errors: &mut Vec<ConfigError>,
) -> GuardSettings {
    let path = |p: &Option<Spanned<String>>| p.as_ref().map(|p| base.join(p.get_ref()));
    let rrl = file.rrl.map(|r| {
        let at = line(r.span());
        let r = r.into_inner();
        let v = (r.rate.unwrap_or(200), r.slip.unwrap_or(2), r.ipv4_prefix.unwrap_or(24), r.ipv6_prefix.unwrap_or(56));
        if v.0 == 0 {
            errors.push(err(at, "[guard] rrl rate must be at least 1 (leave rrl out for none)".into()));
        }
        if v.2 == 0 || v.2 > 32 || v.3 == 0 || v.3 > 128 {
            errors.push(err(at, "[guard] rrl prefixes: ipv4_prefix 1..=32, ipv6_prefix 1..=128".into()));
        }
        v
    });
    let mut d = DetectSettings::default();
    let mut check = |v: &Option<Spanned<u32>>, lo: u32, hi: u32, what: &str, dst: &mut u32| {
        if let Some(v) = v {
            if !(lo..=hi).contains(v.get_ref()) {
                errors.push(err(line(v.span()), format!("[guard] {what} must be {lo}..={hi}, not {}", v.get_ref())));
            }
            *dst = *v.get_ref();
        }
    };
    check(&file.detect_interval_ms, 100, 1000, "detect_interval_ms", &mut d.interval_ms);
    check(&file.detect_min_rate, 1, u32::MAX, "detect_min_rate", &mut d.min_rate);
    check(&file.detect_unblock_after, 1, 3600, "detect_unblock_after", &mut d.unblock_after);
    let mut offload_slots = 0;
    check(&file.offload_slots, 0, 4096, "offload_slots", &mut offload_slots);
    if let Some(b) = &file.detect_block_for {
        match b.get_ref().as_str() {
            "never" => d.block_for = None,
            t => match xdns_guard::monitor::parse_duration(t) {
                Ok(0) => errors.push(err(line(b.span()), "[guard] detect_block_for must be longer than 0 (or \"never\")".into())),
                Ok(secs) => d.block_for = Some(secs),
                Err(e) => errors.push(err(line(b.span()), format!("[guard] detect_block_for: {e}"))),
            },
        }
    }
    let mut cookie_secret_lifetime = Some(DEFAULT_COOKIE_SECRET_LIFETIME);
    if let Some(l) = &file.cookie_secret_lifetime {
        match l.get_ref().as_str() {
            "never" => cookie_secret_lifetime = None,
            t => match xdns_guard::monitor::parse_duration(t) {
                Ok(0) => errors.push(err(line(l.span()), "[guard] cookie_secret_lifetime must be longer than 0 (or \"never\")".into())),
                Ok(secs) => cookie_secret_lifetime = Some(secs),
                Err(e) => errors.push(err(line(l.span()), format!("[guard] cookie_secret_lifetime: {e}"))),
            },
        }
    }
    GuardSettings {
        blocklist: path(&file.blocklist),
        allowlist: path(&file.allowlist),
        block_names: path(&file.block_names),
        rrl,
        cookies: file.cookies.unwrap_or(false),
        cookie_secret_lifetime,
        detect: file.detect.unwrap_or(false).then_some(d),
        offload_slots,
    }
}

/// The lists of `s`, read and parsed (every error, `FILE:LINE: reason`).
pub fn load_lists(s: &GuardSettings) -> Result<(PrefixList, PrefixList, NameList), Vec<String>> {
    let mut errors = Vec::new();
    let mut read = |p: &Option<PathBuf>| -> Option<(String, String)> {
        let p = p.as_ref()?;
        match std::fs::read_to_string(p) {
            Ok(t) => Some((p.display().to_string(), t)),
            Err(e) => {
                errors.push(format!("{}: cannot read: {e}", p.display()));
                None
            }
        }
    };
    let (b, a, n) = (read(&s.blocklist), read(&s.allowlist), read(&s.block_names));
    let mut prefixes = |f: Option<(String, String)>| match f {
        None => PrefixList::new(),
        Some((name, text)) => xdns_guard::lists::parse_prefix_list(&name, &text).unwrap_or_else(|e| {
            errors.push(e.to_string());
            PrefixList::new()
        }),
    };
    let (block, allow) = (prefixes(b), prefixes(a));
    let names = match n {
        None => NameList::default(),
        Some((name, text)) => xdns_guard::lists::parse_name_list(&name, &text).unwrap_or_else(|e| {
            errors.push(e.to_string());
            NameList::default()
        }),
    };
    if errors.is_empty() {
        Ok((block, allow, names))
    } else {
        Err(errors)
    }
}

/// The guard of a running server (swapped whole on reload; the RRL table lives on).
pub struct Guard {
    pub settings: GuardSettings,
    block: PrefixList,
    allow: PrefixList,
    names: NameList,
    rrl: Option<std::sync::Arc<Mutex<Rrl>>>,
    cookies: Option<std::sync::Arc<Cookies>>,
    pub counters: GuardCounters,
}

/// The server cookie secrets (current and previous) and their rotation, handed from guard to
/// guard across reloads so that a reload neither invalidates cookies nor restarts the clock.
pub struct Cookies {
    secrets: arc_swap::ArcSwap<CookieSecrets>,
    /// When the current secret was made current.
    since: Mutex<std::time::Instant>,
    rotations: AtomicU64,
}

impl Cookies {
    fn new(now: std::time::Instant) -> Self {
        Self { secrets: arc_swap::ArcSwap::from_pointee(CookieSecrets::new(rand::random())), since: Mutex::new(now), rotations: AtomicU64::new(0) }
    }

    /// The secrets now (one load; a rotation swaps them whole).
    pub fn secrets(&self) -> arc_swap::Guard<std::sync::Arc<CookieSecrets>> {
        self.secrets.load()
    }

    /// A new current secret, drawn at random; the current one becomes the previous one and
    /// the previous one is forgotten (RFC 9018 §4.3's overlap: cookies of the secret just
    /// replaced keep verifying until the next rotation, and are answered with a new cookie).
    pub fn rotate(&self, now: std::time::Instant) {
        let mut since = self.since.lock().unwrap_or_else(|e| e.into_inner());
        let mut next = CookieSecrets::clone(&self.secrets.load());
        next.rotate(rand::random());
        self.secrets.store(std::sync::Arc::new(next));
        *since = now;
        self.rotations.fetch_add(1, Relaxed);
    }

    /// Rotate if the current secret is `lifetime` seconds old or older at `now`; whether it did.
    pub fn rotate_if_due(&self, lifetime: u64, now: std::time::Instant) -> bool {
        let due = {
            let since = self.since.lock().unwrap_or_else(|e| e.into_inner());
            now.saturating_duration_since(*since) >= std::time::Duration::from_secs(lifetime)
        };
        if due {
            self.rotate(now);
        }
        due
    }

    /// Rotations since the daemon started.
    pub fn rotations(&self) -> u64 {
        self.rotations.load(Relaxed)
    }
}

/// What the guard did, for `xdns stats` (`guard.*`).
#[derive(Default)]
pub struct GuardCounters {
    blocked_source: AtomicU64,
    blocked_name: AtomicU64,
    rrl_dropped: AtomicU64,
    rrl_slipped: AtomicU64,
    cookie_valid: AtomicU64,
    cookie_sent: AtomicU64,
    cookie_formerr: AtomicU64,
}

/// What the first step decided for a message.
pub enum Verdict {
    /// Go on; `cookie` carries what the last step needs.
    Pass(Cookie),
    /// No answer.
    Drop,
    /// Answer FORMERR (a malformed COOKIE option).
    FormErr,
}

/// The client cookie of a query and whether its server cookie was valid.
#[derive(Default, Clone, Copy)]
pub struct Cookie {
    client: Option<[u8; 8]>,
    /// The server cookie to answer with when the client's own is valid and fresh (echoed as
    /// it came, RFC 9018 §4.3, as the kernel does); None: build a new one.
    echo: Option<[u8; 16]>,
    proven: bool,
}

impl Guard {
    /// The guard of `s`, its lists loaded; `previous` hands over the RRL table (when its
    /// settings did not change) and the cookie secret, so that a reload neither resets the
    /// rate accounts nor invalidates cookies.
    pub fn load(s: &GuardSettings, previous: Option<&Guard>) -> Result<Self, Vec<String>> {
        let (block, allow, names) = load_lists(s)?;
        let same_rrl = previous.filter(|p| p.settings.rrl == s.rrl).and_then(|p| p.rrl.clone());
        let rrl = same_rrl.or_else(|| {
            s.rrl.map(|(rate, slip, v4, v6)| {
                let mut cfg = RrlConfig { rate, slip, ipv4_prefix: v4, ipv6_prefix: v6, ..RrlConfig::default() };
                cfg.hash_key = rand::random();
                std::sync::Arc::new(Mutex::new(Rrl::new(cfg)))
            })
        });
        let cookies = s.cookies.then(|| match previous.and_then(|p| p.cookies.clone()) {
            Some(c) => c,
            None => std::sync::Arc::new(Cookies::new(std::time::Instant::now())),
        });
        Ok(Self { settings: s.clone(), block, allow, names, rrl, cookies, counters: GuardCounters::default() })
    }

    /// The lists for the kernel's guard stage: the file blocklist with the live blocks
    /// added, the allowlist, the blocked names with the live suffix blocks, and the
    /// exceptions of those (their known labels).
    pub fn kernel_lists(&self, live: &LiveBlocks) -> crate::xdp::fastpath::GuardLists {
        let mut block = self.block.clone();
        if let Some(live) = live.list.load().as_deref() {
            for p in live.v4.iter().map(|p| xdns_guard::lists::Prefix::V4(*p)).chain(live.v6.iter().map(|p| xdns_guard::lists::Prefix::V6(*p))) {
                block.insert(p);
            }
        }
        let mut names = self.names.clone();
        let dynamic = live.names.load();
        names.entries.extend(dynamic.0.iter().cloned());
        (block, self.allow.clone(), names, dynamic.1.clone())
    }

    /// Whether the blocklist file has an entry for exactly `p` (a live block of it must
    /// not take the file's entry out of the kernel when lifted).
    pub fn file_lists(&self, p: &xdns_guard::lists::Prefix) -> bool {
        let net = match p {
            xdns_guard::lists::Prefix::V4(v) => IpAddr::from(v.addr),
            xdns_guard::lists::Prefix::V6(v) => IpAddr::from(v.addr),
        };
        self.block.longest_match(net).is_some_and(|q| q.len() <= p.len())
    }

    /// The allowlist (the detector never blocks what it overlaps).
    pub fn allowlist(&self) -> &PrefixList {
        &self.allow
    }

    /// RRL and cookies for the kernel's answers: the same rate, slip and prefixes as
    /// userspace's RRL, the same cookie secrets (current and previous).
    pub fn kernel_rrl(&self) -> xdns_bpf::guard::RrlSettings {
        let (rate, slip, ipv4_prefix, ipv6_prefix) = self.settings.rrl.unwrap_or((0, 0, 24, 56));
        xdns_bpf::guard::RrlSettings {
            rate,
            slip,
            ipv4_prefix,
            ipv6_prefix,
            cookies: self.cookies.as_ref().map(|c| {
                let c = c.secrets();
                (*c.current(), c.previous().copied())
            }),
        }
    }

    /// Rotate the server cookie secret if `cookie_secret_lifetime` has passed at `now`;
    /// whether it did (the kernel's copy must then be written: `set_rrl`).
    pub fn rotate_cookies_if_due(&self, now: std::time::Instant) -> bool {
        match (&self.cookies, self.settings.cookie_secret_lifetime) {
            (Some(c), Some(lifetime)) => c.rotate_if_due(lifetime, now),
            _ => false,
        }
    }

    /// The server cookie secrets and their rotation (`None`: cookies off).
    pub fn cookies(&self) -> Option<&Cookies> {
        self.cookies.as_deref()
    }

    /// Whether `ip` is on the allowlist (never blocked, never limited).
    pub fn allows(&self, ip: Option<IpAddr>) -> bool {
        ip.is_some_and(|ip| self.allow.contains(ip))
    }

    /// Step 1 of the plan (`begin`), before any parsing that answers.
    pub fn begin(&self, wire: &[u8], peer: Option<IpAddr>) -> Verdict {
        let allowed = peer.is_some_and(|ip| self.allow.contains(ip));
        if !allowed {
            if peer.is_some_and(|ip| self.block.contains(ip)) {
                self.counters.blocked_source.fetch_add(1, Relaxed);
                return Verdict::Drop;
            }
            if !self.names.entries.is_empty() {
                if let Some(name) = question_name(wire) {
                    if self.names.matches(&name).is_some() {
                        self.counters.blocked_name.fetch_add(1, Relaxed);
                        return Verdict::Drop;
                    }
                }
            }
        }
        let mut cookie = Cookie { proven: allowed, ..Cookie::default() };
        if let (Some(cookies), Some(ip)) = (&self.cookies, peer) {
            if let Some(opt) = cookie_option(wire) {
                let secrets = cookies.secrets();
                match parse_opt_cookie(&opt) {
                    Ok(Some(c)) => {
                        let (proven, server) = secrets.answer(&c, ip, unix_now());
                        if proven {
                            self.counters.cookie_valid.fetch_add(1, Relaxed);
                        }
                        // the client's own cookie, when `answer` kept it (valid, fresh)
                        if c.server() == Some(&server[..]) {
                            cookie.echo = Some(server);
                        }
                        cookie.client = Some(c.client);
                        cookie.proven |= proven;
                    }
                    Ok(None) => {}
                    Err(_) => {
                        self.counters.cookie_formerr.fetch_add(1, Relaxed);
                        return Verdict::FormErr;
                    }
                }
            }
        }
        Verdict::Pass(cookie)
    }

    /// The last step (`end`), on an answer about to be sent: the server cookie added; over
    /// UDP, RRL (`Some(false)`: drop it; the answer may have been cut to a slip).
    pub fn end(&self, answer: &mut Vec<u8>, peer: Option<IpAddr>, udp: bool, cookie: Cookie, zone_hash: u64) -> bool {
        if let (Some(cookies), Some(client), Some(ip)) = (&self.cookies, cookie.client, peer) {
            let server = cookie.echo.unwrap_or_else(|| cookies.secrets().build(&client, ip, unix_now()));
            let mut data = client.to_vec();
            data.extend_from_slice(&server);
            if xdns_wire::opt::push_option(answer, 10, &data) {
                self.counters.cookie_sent.fetch_add(1, Relaxed);
            }
        }
        let (Some(rrl), Some(ip), true, false) = (&self.rrl, peer, udp, cookie.proven) else {
            return true;
        };
        let decision = rrl.lock().unwrap_or_else(|e| e.into_inner()).decide(monotonic_ns(), ip, classify(answer), zone_hash);
        match decision {
            Decision::Pass => true,
            Decision::Drop => {
                self.counters.rrl_dropped.fetch_add(1, Relaxed);
                false
            }
            Decision::Slip => {
                self.counters.rrl_slipped.fetch_add(1, Relaxed);
                slip(answer)
            }
        }
    }

    /// The `guard` counter group.
    pub fn snapshot(&self, s: &mut Snapshot) {
        let c = &self.counters;
        let values = [
            ("blocked_source", &c.blocked_source),
            ("blocked_name", &c.blocked_name),
            ("rrl_dropped", &c.rrl_dropped),
            ("rrl_slipped", &c.rrl_slipped),
            ("cookie_valid", &c.cookie_valid),
            ("cookie_sent", &c.cookie_sent),
            ("cookie_formerr", &c.cookie_formerr),
        ]
        .map(|(k, v)| (k.to_string(), v.load(Relaxed)))
        .into_iter()
        .chain([
            ("blocklist_entries".to_string(), self.block.len() as u64),
            ("allowlist_entries".to_string(), self.allow.len() as u64),
            ("blocked_names".to_string(), self.names.entries.len() as u64),
            ("cookie_rotations".to_string(), self.cookies.as_ref().map_or(0, |c| c.rotations())),
        ]);
        s.groups.insert(
            "guard".into(),
            Group::counters("The userspace guard: messages dropped (blocked source or name, over the rate limit), slipped, cookies, rotations of the cookie secret, list sizes.", "counter", values),
        );
    }
}

/// Blocks made live (`xdns guard block`, later the detector), beside the list files: kept in
/// `xdns_guard::monitor` (origin, reason, expiry), applied as a prefix list swapped whole on
/// every change (`None` while empty, so that the query path pays one load). They live with the
/// process: a reload keeps them, a restart starts without them.
pub struct LiveBlocks {
    pub(crate) monitor: Mutex<xdns_guard::monitor::Monitor>,
    pub list: arc_swap::ArcSwapOption<PrefixList>,
    /// The detector's suffix blocks (`*.suffix` entries) and their exceptions (each known
    /// label, exact and below), for the kernel's name check.
    pub names: arc_swap::ArcSwap<(Vec<xdns_guard::lists::NameEntry>, Vec<xdns_guard::lists::NameEntry>)>,
    /// Known labels kept by each suffix block (lowercase wire suffix → labels).
    pub(crate) keep: Mutex<std::collections::HashMap<Vec<u8>, Vec<Vec<u8>>>>,
    /// Where each blocked source sits: the hardware tier's label, else the kernel list.
    pub(crate) tiers: Mutex<std::collections::HashMap<xdns_guard::lists::Prefix, &'static str>>,
    /// Set while the detector runs: it ticks the monitor (expiry included) each interval.
    pub detecting: std::sync::atomic::AtomicBool,
    /// Held while the kernel's lists are written (a whole generation, or one block added or
    /// lifted), so that no write works from a state another has replaced.
    pub writing: Mutex<()>,
    /// The detection loop's counters (`crate::detect`).
    pub counters: crate::detect::DetectCounters,
}

impl Default for LiveBlocks {
    fn default() -> Self {
        Self {
            monitor: Mutex::new(xdns_guard::monitor::Monitor::new(Default::default())),
            list: Default::default(),
            names: Default::default(),
            keep: Default::default(),
            tiers: Default::default(),
            detecting: Default::default(),
            writing: Mutex::new(()),
            counters: Default::default(),
        }
    }
}

impl LiveBlocks {
    /// `guard block PREFIX [SECONDS]`, `guard unblock PREFIX`, `guard list`: the reply line.
    pub fn command(&self, cmd: &str) -> String {
        use xdns_guard::monitor::{Blocked, Origin, Target};
        let words: Vec<&str> = cmd.split_ascii_whitespace().skip(1).collect();
        let now = u64::from(unix_now());
        let mut m = self.monitor.lock().unwrap_or_else(|e| e.into_inner());
        let reply = match words.as_slice() {
            ["list"] => {
                let tiers = self.tiers.lock().unwrap_or_else(|e| e.into_inner());
                let keep = self.keep.lock().unwrap_or_else(|e| e.into_inner());
                let entries: Vec<serde_json::Value> = m
                    .entries()
                    .into_iter()
                    .map(|e| {
                        serde_json::json!({
                            "target": e.target.to_string(),
                            "origin": format!("{:?}", e.origin).to_lowercase(),
                            "reason": e.reason,
                            "rate": e.rate,
                            "age_seconds": now.saturating_sub(e.since),
                            "expires_in_seconds": e.expires.map(|x| x.saturating_sub(now)),
                            "tier": match &e.target {
                                Target::Source(p) => tiers.get(p).copied().unwrap_or("kernel list"),
                                Target::UnknownLabels(_) => "kernel name check",
                            },
                            "keeps": match &e.target {
                                Target::UnknownLabels(sfx) => keep.get(sfx).map(|k| k.len()),
                                Target::Source(_) => None,
                            },
                        })
                    })
                    .collect();
                return serde_json::to_string(&entries).unwrap_or_else(|e| format!("error: {e}"));
            }
            ["block", prefix, rest @ ..] if rest.len() <= 1 => {
                let p = match xdns_guard::lists::parse_prefix(prefix) {
                    Ok(p) => p,
                    Err(e) => return format!("error: {e}"),
                };
                let ttl = match rest.first().map(|s| xdns_guard::monitor::parse_duration(s)) {
                    Some(Err(e)) => return format!("error: {e}"),
                    Some(Ok(t)) => Some(t),
                    None => None,
                };
                match m.block(now, Target::Source(p), Origin::Manual, "manual", ttl, 0.0) {
                    Blocked::Added => format!("ok blocked {p}"),
                    Blocked::Updated => format!("ok {p} was blocked; updated"),
                    Blocked::Full => return "error: the block list is full".into(),
                }
            }
            ["unblock", prefix] if prefix.starts_with("*.") => {
                let Some(wire) = xdns_guard::lists::parse_name_list("command", prefix).ok().and_then(|l| l.entries.into_iter().next()) else {
                    return format!("error: not a suffix: {prefix}");
                };
                match m.unblock(&Target::UnknownLabels(wire.wire)) {
                    Some(_) => format!("ok unblocked {prefix}"),
                    None => return format!("error: {prefix} is not blocked"),
                }
            }
            ["unblock", prefix] => match xdns_guard::lists::parse_prefix(prefix) {
                Ok(p) => match m.unblock(&Target::Source(p)) {
                    Some(_) => format!("ok unblocked {p}"),
                    None => return format!("error: {p} is not blocked"),
                },
                Err(e) => return format!("error: {e}"),
            },
            _ => return format!("error: usage: guard list | guard block PREFIX [DURATION] | guard unblock PREFIX, not `{}`", cmd.escape_debug()),
        };
        self.publish(&m);
        reply
    }

    /// Drop the entries whose time has come (every second); true if any went. Nothing
    /// while the detector runs: its interval does it.
    pub fn expire(&self) -> bool {
        if self.detecting.load(Relaxed) {
            return false;
        }
        let mut m = self.monitor.lock().unwrap_or_else(|e| e.into_inner());
        let thresholds = xdns_guard::monitor::Thresholds { source_pps: f64::MAX, suffix_qps: f64::MAX };
        let gone = m.tick(u64::from(unix_now()), thresholds);
        for (t, why) in &gone {
            tracing::info!(target = %t, reason = ?why, "guard: unblocked");
        }
        if !gone.is_empty() {
            self.publish(&m);
        }
        !gone.is_empty()
    }

    /// Publish the monitor's entries: the source list userspace checks (and the kernel's
    /// next generation), and the suffix blocks with their exceptions.
    pub(crate) fn publish(&self, m: &xdns_guard::monitor::Monitor) {
        use xdns_guard::lists::{NameEntry, NameMatch};
        let mut list = PrefixList::new();
        let (mut blocks, mut exceptions) = (Vec::new(), Vec::new());
        let mut keep = self.keep.lock().unwrap_or_else(|e| e.into_inner());
        for e in m.entries() {
            match &e.target {
                xdns_guard::monitor::Target::Source(p) => {
                    list.insert(*p);
                }
                xdns_guard::monitor::Target::UnknownLabels(sfx) => {
                    blocks.push(NameEntry { wire: sfx.clone(), kind: NameMatch::Suffix });
                    for l in keep.get(sfx).into_iter().flatten() {
                        let mut w = vec![l.len() as u8];
                        w.extend_from_slice(l);
                        w.extend_from_slice(sfx);
                        exceptions.push(NameEntry { wire: w.clone(), kind: NameMatch::Exact });
                        exceptions.push(NameEntry { wire: w, kind: NameMatch::Suffix });
                    }
                }
            }
        }
        keep.retain(|sfx, _| blocks.iter().any(|b| &b.wire == sfx));
        self.list.store((!list.is_empty()).then(|| std::sync::Arc::new(list)));
        self.names.store(std::sync::Arc::new((blocks, exceptions)));
    }

    /// Whether a query for `name` (lowercase wire) is under a live suffix block and not
    /// under one of its known labels (the userspace twin of the kernel's name check).
    pub fn blocks_name(&self, name: &[u8]) -> bool {
        let names = self.names.load();
        if names.0.is_empty() {
            return false;
        }
        // deepest first, as the kernel: an exception ends the walk
        let mut at = 0;
        let mut first = true;
        while let Some(&len) = name.get(at) {
            if len == 0 {
                break;
            }
            let sfx = &name[at..];
            let hit = |l: &[xdns_guard::lists::NameEntry], exact: bool| {
                l.iter().any(|e| e.wire == sfx && (e.kind == xdns_guard::lists::NameMatch::Exact) == exact)
            };
            if first && hit(&names.1, true) {
                return false;
            }
            if !first {
                if hit(&names.1, false) {
                    return false;
                }
                if hit(&names.0, false) {
                    return true;
                }
            }
            first = false;
            at += 1 + usize::from(len);
        }
        false
    }

    /// Whether `ip` is blocked live.
    pub fn blocks(&self, ip: Option<IpAddr>) -> bool {
        match (ip, self.list.load().as_deref()) {
            (Some(ip), Some(list)) => list.contains(ip),
            _ => false,
        }
    }
}

fn unix_now() -> u32 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as u32)
}

fn monotonic_ns() -> u64 {
    static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    EPOCH.get_or_init(std::time::Instant::now).elapsed().as_nanos() as u64
}

/// The question name of a message in lowercase wire form (no compression in a question).
pub fn question_name(wire: &[u8]) -> Option<Vec<u8>> {
    if wire.len() < 12 || u16::from_be_bytes([wire[4], wire[5]]) != 1 {
        return None;
    }
    let mut at = 12;
    let mut name = Vec::new();
    loop {
        let len = usize::from(*wire.get(at)?);
        if len == 0 {
            name.push(0);
            return Some(name);
        }
        if len > 63 || name.len() + len + 1 > 255 {
            return None;
        }
        name.push(len as u8);
        name.extend(wire.get(at + 1..at + 1 + len)?.iter().map(u8::to_ascii_lowercase));
        at += 1 + len;
    }
}

/// The COOKIE option (code 10) of the query's OPT record, as the option (code, length, data)
/// that `parse_opt_cookie` reads.
fn cookie_option(wire: &[u8]) -> Option<Vec<u8>> {
    let data = xdns_wire::opt::option(wire, 10)?;
    let mut opt = vec![0, 10];
    opt.extend_from_slice(&(data.len() as u16).to_be_bytes());
    opt.extend_from_slice(data);
    Some(opt)
}

/// The RRL class of an answer, from its header and counts.
fn classify(answer: &[u8]) -> ResponseClass {
    if answer.len() < 12 {
        return ResponseClass::Error;
    }
    let rcode = answer[3] & 0x0f;
    let aa = answer[2] & 0x04 != 0;
    let an = u16::from_be_bytes([answer[6], answer[7]]);
    let ns = u16::from_be_bytes([answer[8], answer[9]]);
    match rcode {
        0 if an > 0 => ResponseClass::Positive,
        0 if ns > 0 && !aa => ResponseClass::Referral,
        0 => ResponseClass::NoData,
        3 => ResponseClass::NxDomain,
        _ => ResponseClass::Error,
    }
}

/// Cut `answer` to a slip: header and question, TC=1, no records. False when it cannot be
/// (then it is dropped).
fn slip(answer: &mut Vec<u8>) -> bool {
    let Some(qlen) = question_name(answer).map(|n| n.len() + 4) else {
        return false;
    };
    if answer.len() < 12 + qlen {
        return false;
    }
    answer.truncate(12 + qlen);
    answer[2] |= 0x02; // TC
    answer[6..12].fill(0); // AN, NS, AR
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(name: &str, opt: Option<&[u8]>) -> Vec<u8> {
        let mut m = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, u8::from(opt.is_some())];
        for l in name.split('.').filter(|l| !l.is_empty()) {
            m.push(l.len() as u8);
            m.extend_from_slice(l.as_bytes());
        }
        m.extend_from_slice(&[0, 0, 1, 0, 1]);
        if let Some(o) = opt {
            m.extend_from_slice(&[0, 0, 41, 4, 0xd0, 0, 0, 0, 0]);
            m.extend_from_slice(&(o.len() as u16).to_be_bytes());
            m.extend_from_slice(o);
        }
        m
    }

    fn settings(dir: &Path, rrl: Option<(u32, u32, u8, u8)>, cookies: bool) -> GuardSettings {
        std::fs::write(dir.join("b.txt"), "# blocked\n198.18.66.0/24\n2001:db8:66::/48\n").unwrap();
        std::fs::write(dir.join("a.txt"), "198.18.66.7\n").unwrap();
        std::fs::write(dir.join("n.txt"), "bad.example.com\n*.evil.example\n").unwrap();
        GuardSettings {
            blocklist: Some(dir.join("b.txt")),
            allowlist: Some(dir.join("a.txt")),
            block_names: Some(dir.join("n.txt")),
            rrl,
            cookies,
            cookie_secret_lifetime: Some(DEFAULT_COOKIE_SECRET_LIFETIME),
            detect: None,
            offload_slots: 0,
        }
    }

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("xdns-guard-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn ip(s: &str) -> Option<IpAddr> {
        Some(s.parse().unwrap())
    }

    #[test]
    fn lists_drop_blocked_sources_and_names_but_never_the_allowlist() {
        let d = tmp("lists");
        let g = Guard::load(&settings(&d, None, false), None).unwrap();
        let q = query("www.example.com", None);
        assert!(matches!(g.begin(&q, ip("198.18.66.1")), Verdict::Drop));
        assert!(matches!(g.begin(&q, ip("2001:db8:66:1::9")), Verdict::Drop));
        assert!(matches!(g.begin(&q, ip("198.18.66.7")), Verdict::Pass(_)), "allowlisted inside a blocked /24");
        assert!(matches!(g.begin(&q, ip("198.18.0.1")), Verdict::Pass(_)));
        for blocked in ["bad.example.com", "BAD.Example.COM", "x.y.evil.example"] {
            assert!(matches!(g.begin(&query(blocked, None), ip("198.18.0.1")), Verdict::Drop), "{blocked}");
        }
        assert!(matches!(g.begin(&query("good.example.com", None), ip("198.18.0.1")), Verdict::Pass(_)));
        let mut s = Snapshot::default();
        g.snapshot(&mut s);
        assert_eq!(s.groups["guard"].values["blocked_source"], 2);
        assert_eq!(s.groups["guard"].values["blocked_name"], 3);
        // a list with an error names its file and line, and loads nothing
        std::fs::write(d.join("b.txt"), "198.18.0.0/15\n198.18.0.1/33\n").unwrap();
        let errs = Guard::load(&settings_only_block(&d), None).err().unwrap();
        assert!(errs[0].contains("b.txt:2:"), "{errs:?}");
    }

    fn settings_only_block(d: &Path) -> GuardSettings {
        GuardSettings { blocklist: Some(d.join("b.txt")), allowlist: None, block_names: None, rrl: None, cookies: false, cookie_secret_lifetime: None, detect: None, offload_slots: 0 }
    }

    #[test]
    fn detect_keys_parse_and_bad_values_name_their_line() {
        use crate::config::{parse, Overrides};
        let path = Path::new("/tmp/x.toml");
        let ok = "[xdp]\ninterfaces = [\"eth0\"]\n[guard]\ndetect = true\ndetect_interval_ms = 250\ndetect_min_rate = 1000\n\
                  detect_unblock_after = 3\ndetect_block_for = \"10m\"\noffload_slots = 8\n";
        let c = parse(ok, path, &Overrides::default()).unwrap();
        let g = c.guard.unwrap();
        assert_eq!(g.detect, Some(DetectSettings { interval_ms: 250, min_rate: 1000, unblock_after: 3, block_for: Some(600) }));
        assert_eq!(g.offload_slots, 8);
        let never = "[xdp]\ninterfaces = [\"eth0\"]\n[guard]\ndetect = true\ndetect_block_for = \"never\"\n";
        assert_eq!(parse(never, path, &Overrides::default()).unwrap().guard.unwrap().detect.unwrap().block_for, None);
        // off by default, with defaults when on
        assert_eq!(parse("[guard]\n", path, &Overrides::default()).unwrap().guard.unwrap().detect, None);
        for (bad, want) in [
            ("[guard]\ndetect = true\n", "needs [xdp]"),
            ("[xdp]\ninterfaces = [\"eth0\"]\n[guard]\ndetect = true\ndetect_interval_ms = 5000\n", ":5: [guard] detect_interval_ms must be 100..=1000"),
            ("[xdp]\ninterfaces = [\"eth0\"]\n[guard]\ndetect_block_for = \"5y\"\n", ":4: [guard] detect_block_for"),
            ("[xdp]\ninterfaces = [\"eth0\"]\n[guard]\noffload_slots = 100000\n", ":4: [guard] offload_slots must be 0..=4096"),
        ] {
            let errs = parse(bad, path, &Overrides::default()).unwrap_err();
            let text: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
            assert!(text.iter().any(|t| t.contains(want)), "{bad}: {text:?}");
        }
    }

    #[test]
    fn live_suffix_blocks_keep_known_labels_in_userspace() {
        use xdns_guard::monitor::{Origin, Target};
        let live = LiveBlocks::default();
        let sfx = b"\x07example\x03com\x00".to_vec();
        live.keep.lock().unwrap().insert(sfx.clone(), vec![b"www".to_vec(), b"mail".to_vec()]);
        {
            let mut m = live.monitor.lock().unwrap();
            m.block(1, Target::UnknownLabels(sfx), Origin::Detected, "random subdomains", None, 100.0);
            live.publish(&m);
        }
        let w = |n: &str| question_name(&query(n, None)).unwrap();
        assert!(live.blocks_name(&w("xk3j9q.example.com")));
        assert!(live.blocks_name(&w("a.xk3j9q.example.com")));
        assert!(!live.blocks_name(&w("www.example.com")));
        assert!(!live.blocks_name(&w("a.b.www.example.com")));
        assert!(!live.blocks_name(&w("mail.example.com")));
        assert!(!live.blocks_name(&w("example.com")));
        assert!(!live.blocks_name(&w("x.example.net")));
        let names = live.names.load();
        assert_eq!((names.0.len(), names.1.len()), (1, 4));
        // lifted by hand: nothing blocked, the kept labels forgotten
        assert!(live.command("guard unblock *.example.com.").starts_with("ok"));
        assert!(!live.blocks_name(&w("xk3j9q.example.com")));
        assert!(live.keep.lock().unwrap().is_empty());
    }

    #[test]
    fn rrl_drops_and_slips_over_the_rate_and_a_valid_cookie_bypasses_it() {
        let d = tmp("rrl");
        let g = Guard::load(&settings(&d, Some((5, 2, 24, 56)), true), None).unwrap();
        let mut answer = query("www.example.com", None);
        answer[2] |= 0x84;
        answer[7] = 1; // one answer record (counts only matter for the class)
        let (mut sent, mut slipped) = (0, 0);
        for _ in 0..40 {
            let mut a = answer.clone();
            if g.end(&mut a, ip("198.18.1.1"), true, Cookie::default(), 1) {
                if a[2] & 0x02 != 0 {
                    slipped += 1;
                    assert_eq!(&a[6..12], &[0; 6], "a slip carries no records");
                } else {
                    sent += 1;
                }
            }
        }
        assert!((5..=10).contains(&sent), "{sent} whole answers");
        assert!(slipped >= 15, "every second limited answer slips: {slipped}");
        // TCP is never limited
        let mut a = answer.clone();
        assert!(g.end(&mut a, ip("198.18.1.1"), false, Cookie::default(), 1) && a[2] & 0x02 == 0);
        // a client whose server cookie is valid is not limited, and gets its cookie back
        let client = [7u8; 8];
        let server = g.cookies.as_ref().unwrap().secrets().build(&client, "198.18.1.1".parse().unwrap(), unix_now());
        let mut opt = vec![0, 10, 0, 24];
        opt.extend_from_slice(&client);
        opt.extend_from_slice(&server);
        let Verdict::Pass(cookie) = g.begin(&query("www.example.com", Some(&opt)), ip("198.18.1.1")) else { panic!() };
        assert!(cookie.proven);
        let mut a = answer.clone();
        a[7] = 0; // no answer record in this test message: only its OPT
        a[11] = 1;
        a.extend_from_slice(&[0, 0, 41, 4, 0xd0, 0, 0, 0, 0, 0, 0]);
        for _ in 0..10 {
            let mut b = a.clone();
            assert!(g.end(&mut b, ip("198.18.1.1"), true, cookie, 1));
            // fresh (RFC 9018 §4.3): echoed as it came, as the kernel does (bpf/rrl.h)
            assert_eq!(xdns_wire::opt::option(&b, 10), Some(&[&client[..], &server[..]].concat()[..]));
        }
        // a malformed COOKIE option (client cookie of 5 bytes): FORMERR
        let bad = [0, 10, 0, 5, 1, 2, 3, 4, 5];
        assert!(matches!(g.begin(&query("www.example.com", Some(&bad)), ip("198.18.1.1")), Verdict::FormErr));
    }

    /// The cookie secret rotates every `cookie_secret_lifetime`, the previous one verifying
    /// until the next rotation: a cookie made before a rotation still proves its client after
    /// one (and is answered with a fresh cookie), no longer after two; a reload keeps the
    /// secrets and the clock; the kernel gets (current, previous).
    #[test]
    fn cookie_secrets_rotate_on_time_and_the_previous_verifies_for_one_rotation() {
        let d = tmp("rotate");
        let mut s = settings(&d, Some((5, 2, 24, 56)), true);
        s.cookie_secret_lifetime = Some(10);
        let g = Guard::load(&s, None).unwrap();
        let c = g.cookies().unwrap();
        let t0 = *c.since.lock().unwrap();
        let client = [9u8; 8];
        let peer = "198.18.1.9".parse().unwrap();
        let server = c.secrets().build(&client, peer, unix_now());
        let mut opt = vec![0, 10, 0, 24];
        opt.extend_from_slice(&client);
        opt.extend_from_slice(&server);
        let proven = |g: &Guard| match g.begin(&query("www.example.com", Some(&opt)), Some(peer)) {
            Verdict::Pass(c) => c.proven,
            _ => panic!("not passed"),
        };
        assert!(proven(&g));
        let first = g.kernel_rrl().cookies.unwrap();
        assert_eq!(first.1, None, "no previous secret before a rotation");
        // not yet due, then due
        assert!(!g.rotate_cookies_if_due(t0 + std::time::Duration::from_secs(9)));
        assert!(g.rotate_cookies_if_due(t0 + std::time::Duration::from_secs(10)));
        assert_eq!(g.cookies().unwrap().rotations(), 1);
        let second = g.kernel_rrl().cookies.unwrap();
        assert_eq!(second.1, Some(first.0), "the kernel verifies the previous secret too");
        assert_ne!(second.0, first.0);
        assert!(proven(&g), "a cookie of the previous secret still proves its client");
        let (_, fresh) = g.cookies().unwrap().secrets().answer(&xdns_guard::cookies::parse_opt_cookie(&opt).unwrap().unwrap(), peer, unix_now());
        assert_ne!(fresh[..], server[..], "and is answered with a cookie of the new secret");
        // a reload keeps the secrets and the clock: not due 5 s after the rotation
        let g = Guard::load(&s, Some(&g)).unwrap();
        assert!(proven(&g));
        assert!(!g.rotate_cookies_if_due(t0 + std::time::Duration::from_secs(15)));
        assert!(g.rotate_cookies_if_due(t0 + std::time::Duration::from_secs(20)));
        assert!(!proven(&g), "two rotations later the cookie no longer verifies");
        assert_eq!(g.kernel_rrl().cookies.unwrap().1, Some(second.0));
        let mut snap = Snapshot::default();
        g.snapshot(&mut snap);
        assert_eq!(snap.groups["guard"].values.get("cookie_rotations"), Some(&2));
        // "never": no rotation
        s.cookie_secret_lifetime = None;
        let g = Guard::load(&s, None).unwrap();
        assert!(!g.rotate_cookies_if_due(std::time::Instant::now() + std::time::Duration::from_secs(1 << 30)));
    }
}
