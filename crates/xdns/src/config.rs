//! The daemon's configuration: defaults ← TOML file ← command line.
//!
//! Every table rejects unknown keys (`deny_unknown_fields`); every error names the configuration
//! file and, when it belongs to one, the line (`FILE:LINE: reason`). Relative zone file paths
//! are resolved against the configuration file's directory. The file is read again on SIGHUP,
//! with the same command-line overrides applied on top.

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;
use xdns_zone::ZoneSource;

use crate::recursion::{FileResolver, ResolverSettings};
use crate::xfr::keys::KeyConfig;
use crate::xfr::primary::OutgoingConfig;
use crate::xdp::XdpConfig;

/// Default path of the control socket.
pub const DEFAULT_CONTROL: &str = "/run/xdns/control.sock";
/// Default advertised EDNS payload size (the DNS flag day 2020 value).
pub const DEFAULT_EDNS_PAYLOAD: u16 = 1232;
/// Smallest accepted `edns_payload` (RFC 6891: values below 512 are treated as 512).
pub const MIN_EDNS_PAYLOAD: u16 = 512;
/// Largest accepted `edns_payload`; larger values only invite fragmentation.
pub const MAX_EDNS_PAYLOAD: u16 = 4096;

/// A complete, validated configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// The file this configuration was read from (for messages and reloads).
    pub path: PathBuf,
    /// UDP and TCP listen addresses.
    pub listen: Vec<SocketAddr>,
    /// Path of the Unix control socket used by `xdns stats`.
    pub control: PathBuf,
    /// Address of the optional Prometheus `/metrics` endpoint.
    pub metrics: Option<SocketAddr>,
    /// EDNS payload size advertised and used as the cap for UDP responses.
    pub edns_payload: u16,
    /// UDP worker threads per listen address; 0 = one per core.
    pub udp_workers: usize,
    /// TCP settings.
    pub tcp: TcpConfig,
    /// Logging settings.
    pub log: LogConfig,
    /// XDP fast path settings (owned by the XDP part).
    pub xdp: XdpConfig,
    /// Zones to serve, in configuration order, with absolute or config-relative paths resolved.
    pub zones: Vec<ZoneSource>,
    /// The recursive resolver (`[resolver]`); `None` = authoritative only.
    pub resolver: Option<ResolverSettings>,
    /// `user` (and `group`): who `serve` runs as once its sockets, program and maps are
    /// open (`crate::privilege`); `None` = stays root.
    pub run_as: Option<crate::privilege::RunAs>,
    /// `[guard]`: lists, RRL and cookies (`crate::guard`); `None` = off.
    pub guard: Option<crate::guard::GuardSettings>,
    /// `[inpath]`: the transparent in-path cache on a forwarding host (`crate::inpath`);
    /// `None` = off.
    pub inpath: Option<crate::inpath::InpathConfig>,
    /// `[telemetry] rules`: which answers are timed (`crate::telemetry`); empty = off.
    pub telemetry: Vec<xdns_bpf::telemetry::Rule>,
    /// TSIG keys (`[[key]]`), by name.
    pub keys: Vec<KeyConfig>,
    /// Zones transferred from primaries (`[[zone]]` with `primaries`), in configuration order.
    pub secondaries: Vec<SecondaryConfig>,
    /// The primary side of zones (`notify`, `allow_transfer`, `key`), for every zone that
    /// has one of them.
    pub outgoing: Vec<OutgoingConfig>,
    /// Catalog zones (`[[catalog]]`, RFC 9432): transferred like secondary zones; their
    /// members become secondary zones of the same primaries and key.
    pub catalogs: Vec<SecondaryConfig>,
    /// `[dnstap]`: query and response logging (`crate::dnstap`); `None` = off.
    pub dnstap: Option<crate::dnstap::Settings>,
}

/// A secondary zone: `[[zone]]` with `primaries`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SecondaryConfig {
    /// The apex in presentation form, lowercase, with the final dot.
    pub name: String,
    /// Where to transfer from (and the only addresses whose NOTIFY is accepted), in order.
    pub primaries: Vec<SocketAddr>,
    /// The TSIG key transfers and NOTIFYs are signed with.
    pub key: Option<KeyConfig>,
    /// Where the last good copy is written (and read at start), if anywhere.
    pub file: Option<PathBuf>,
}

/// `[tcp]` table.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TcpConfig {
    /// Close a connection that has been idle (no query read, nothing pending) this long, while
    /// at most half the slots are in use; less beyond (down to `idle_min_ms`).
    pub idle_timeout_ms: u64,
    /// The idle timeout when every slot is in use (at most `idle_timeout_ms`).
    pub idle_min_ms: u64,
    /// Connection slots over all TCP listeners. When all are taken, a new connection closes
    /// the longest-idle connection of the client holding the most; it is refused only when
    /// none is idle.
    pub max_connections: usize,
    /// Connections one client (an IPv4 address, an IPv6 /64) may hold; its next one closes
    /// its own longest-idle connection, or is refused when all of them are busy.
    pub max_per_client: usize,
    /// A query must arrive whole, and an answer be written, within this long of its first
    /// byte (slow writers, slow readers).
    pub io_timeout_ms: u64,
    /// Queries read but not yet answered on one connection before reading pauses.
    pub max_pipelined: usize,
}

impl Default for TcpConfig {
    fn default() -> Self {
        Self {
            idle_timeout_ms: 10_000,
            idle_min_ms: 1_000,
            max_connections: 1024,
            max_per_client: 64,
            io_timeout_ms: 2_000,
            max_pipelined: 100,
        }
    }
}

/// `[log]` table.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    /// A `tracing` filter: a level (`info`) or directives (`xdns=debug,warn`). RUST_LOG wins.
    pub level: String,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            level: "info".into(),
        }
    }
}

/// Values given on the command line; they override the file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Overrides {
    /// Replaces `listen` when not empty.
    pub listen: Vec<SocketAddr>,
    /// Replaces `control`.
    pub control: Option<PathBuf>,
    /// Replaces `metrics`.
    pub metrics: Option<SocketAddr>,
    /// Replaces `udp_workers`.
    pub udp_workers: Option<usize>,
    /// Replaces `[log] level`.
    pub log_level: Option<String>,
}

/// One configuration problem, displayed as `FILE:LINE: reason`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// The configuration file.
    pub file: PathBuf,
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// What is wrong.
    pub reason: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(l) => write!(f, "{}:{}: {}", self.file.display(), l, self.reason),
            None => write!(f, "{}: {}", self.file.display(), self.reason),
        }
    }
}

impl std::error::Error for ConfigError {}

/// The file as written, before defaults and validation.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    listen: Option<Vec<Spanned<String>>>,
    control: Option<String>,
    metrics: Option<Spanned<String>>,
    edns_payload: Option<Spanned<i64>>,
    udp_workers: Option<Spanned<i64>>,
    #[serde(default)]
    tcp: Option<Spanned<TcpConfig>>,
    #[serde(default)]
    log: Option<Spanned<LogConfig>>,
    #[serde(default)]
    xdp: XdpConfig,
    #[serde(default)]
    zone: Vec<FileZone>,
    #[serde(default)]
    resolver: Option<Spanned<FileResolver>>,
    user: Option<Spanned<String>>,
    group: Option<Spanned<String>>,
    #[serde(default)]
    guard: Option<crate::guard::FileGuard>,
    #[serde(default)]
    inpath: Option<Spanned<crate::inpath::FileInpath>>,
    telemetry: Option<FileTelemetry>,
    #[serde(default)]
    key: Vec<Spanned<FileKey>>,
    #[serde(default)]
    catalog: Vec<Spanned<FileCatalog>>,
    #[serde(default)]
    dnstap: Option<Spanned<crate::dnstap::FileDnstap>>,
}

/// `[telemetry]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileTelemetry {
    #[serde(default)]
    rules: Vec<Spanned<String>>,
}

/// One `[[catalog]]` entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileCatalog {
    name: String,
    primaries: Vec<String>,
    key: Option<String>,
    file: Option<String>,
}

/// One `[[key]]` entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileKey {
    name: String,
    algorithm: String,
    secret: String,
}

/// One `[[zone]]` entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileZone {
    name: Spanned<String>,
    file: Option<Spanned<String>>,
    primaries: Option<Spanned<Vec<String>>>,
    key: Option<Spanned<String>>,
    notify: Option<Spanned<Vec<String>>>,
    allow_transfer: Option<Spanned<Vec<String>>>,
}

/// 1-based line number of byte `offset` in `text`.
fn line_of(text: &str, offset: usize) -> usize {
    let end = offset.min(text.len());
    text.as_bytes()[..end]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// Default listen addresses: loopback only, so a bare config never exposes a server.
fn default_listen() -> Vec<SocketAddr> {
    vec![
        SocketAddr::from(([127, 0, 0, 1], 53)),
        SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, 53)),
    ]
}

/// Normalise a zone name to lowercase presentation form with a trailing dot; `None` if invalid.
pub fn normalize_zone_name(name: &str) -> Option<String> {
    let name = name.trim();
    if name == "." {
        return Some(".".into());
    }
    let body = name.strip_suffix('.').unwrap_or(name);
    if body.is_empty() || body.len() > 253 {
        return None;
    }
    for label in body.split('.') {
        if label.is_empty() || label.len() > 63 {
            return None;
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return None;
        }
    }
    Some(format!("{}.", body.to_ascii_lowercase()))
}

/// Read and validate `path`, then apply `over`.
pub fn load(path: &Path, over: &Overrides) -> Result<Config, Vec<ConfigError>> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        vec![ConfigError {
            file: path.to_path_buf(),
            line: None,
            reason: format!("cannot read: {e}"),
        }]
    })?;
    parse(&text, path, over)
}

/// Parse and validate configuration `text` that was read from `path`, then apply `over`.
///
/// Collects every validation error rather than stopping at the first; a TOML syntax or type
/// error (including an unknown key) is reported alone because nothing after it is reliable.
pub fn parse(text: &str, path: &Path, over: &Overrides) -> Result<Config, Vec<ConfigError>> {
    let err = |line: Option<usize>, reason: String| ConfigError {
        file: path.to_path_buf(),
        line,
        reason,
    };
    let file: FileConfig = match toml::from_str(text) {
        Ok(f) => f,
        Err(e) => {
            let line = e.span().map(|s| line_of(text, s.start));
            return Err(vec![err(line, e.message().trim().to_string())]);
        }
    };
    let span_line = |span: std::ops::Range<usize>| Some(line_of(text, span.start));
    let mut errors = Vec::new();
    let base = path.parent().map(Path::to_path_buf).unwrap_or_default();

    let mut listen = Vec::new();
    match &file.listen {
        None => listen = default_listen(),
        Some(list) => {
            for item in list {
                match item.get_ref().trim().parse::<SocketAddr>() {
                    Ok(a) if a.port() == 0 => errors.push(err(
                        span_line(item.span()),
                        format!(
                            "listen address `{}` needs a port other than 0",
                            item.get_ref()
                        ),
                    )),
                    Ok(a) if listen.contains(&a) => errors.push(err(
                        span_line(item.span()),
                        format!("listen address `{a}` given twice"),
                    )),
                    Ok(a) => listen.push(a),
                    Err(_) => errors.push(err(
                        span_line(item.span()),
                        format!(
                            "bad listen address `{}` (expected IP:PORT or [IPv6]:PORT)",
                            item.get_ref()
                        ),
                    )),
                }
            }
            if list.is_empty() && over.listen.is_empty() {
                errors.push(err(None, "`listen` is empty: nothing to serve on".into()));
            }
        }
    }

    let metrics = match &file.metrics {
        None => None,
        Some(m) => match m.get_ref().trim().parse::<SocketAddr>() {
            Ok(a) => Some(a),
            Err(_) => {
                errors.push(err(
                    span_line(m.span()),
                    format!("bad metrics address `{}` (expected IP:PORT)", m.get_ref()),
                ));
                None
            }
        },
    };

    let mut edns_payload = DEFAULT_EDNS_PAYLOAD;
    if let Some(p) = &file.edns_payload {
        let v = *p.get_ref();
        if v < i64::from(MIN_EDNS_PAYLOAD) || v > i64::from(MAX_EDNS_PAYLOAD) {
            errors.push(err(
                span_line(p.span()),
                format!("edns_payload {v} out of range {MIN_EDNS_PAYLOAD}..={MAX_EDNS_PAYLOAD}"),
            ));
        } else {
            edns_payload = v as u16;
        }
    }

    let mut udp_workers = 0usize;
    if let Some(w) = &file.udp_workers {
        let v = *w.get_ref();
        if !(0..=1024).contains(&v) {
            errors.push(err(
                span_line(w.span()),
                format!("udp_workers {v} out of range 0..=1024"),
            ));
        } else {
            udp_workers = v as usize;
        }
    }

    let tcp = match file.tcp {
        None => TcpConfig::default(),
        Some(t) => {
            let line = span_line(t.span());
            let t = t.into_inner();
            if t.idle_timeout_ms == 0 {
                errors.push(err(line, "[tcp] idle_timeout_ms must be at least 1".into()));
            }
            if t.max_connections == 0 {
                errors.push(err(line, "[tcp] max_connections must be at least 1".into()));
            }
            if t.max_pipelined == 0 {
                errors.push(err(line, "[tcp] max_pipelined must be at least 1".into()));
            }
            if t.max_per_client == 0 {
                errors.push(err(line, "[tcp] max_per_client must be at least 1".into()));
            }
            if t.io_timeout_ms == 0 {
                errors.push(err(line, "[tcp] io_timeout_ms must be at least 1".into()));
            }
            if t.idle_min_ms == 0 {
                errors.push(err(line, "[tcp] idle_min_ms must be at least 1".into()));
            }
            t
        }
    };

    let log = match file.log {
        None => LogConfig::default(),
        Some(l) => {
            let line = span_line(l.span());
            let l = l.into_inner();
            if tracing_subscriber::EnvFilter::try_new(&l.level).is_err() {
                errors.push(err(
                    line,
                    format!("[log] level `{}` is not a valid filter", l.level),
                ));
            }
            l
        }
    };

    let mut keys: Vec<KeyConfig> = Vec::new();
    for k in &file.key {
        let line = span_line(k.span());
        let kk = k.get_ref();
        match KeyConfig::parse(&kk.name, &kk.algorithm, &kk.secret) {
            Ok(key) if keys.iter().any(|o| o.name == key.name) => {
                errors.push(err(line, format!("key `{}` configured twice", key.name)))
            }
            Ok(key) => keys.push(key),
            Err(reason) => errors.push(err(line, reason)),
        }
    }

    let mut zones: Vec<ZoneSource> = Vec::new();
    let mut secondaries: Vec<SecondaryConfig> = Vec::new();
    let mut outgoing: Vec<OutgoingConfig> = Vec::new();
    for z in &file.zone {
        let name = match normalize_zone_name(z.name.get_ref()) {
            Some(n) => n,
            None => {
                errors.push(err(
                    span_line(z.name.span()),
                    format!("bad zone name `{}`", z.name.get_ref()),
                ));
                continue;
            }
        };
        if zones.iter().any(|s| s.name == name) || secondaries.iter().any(|s| s.name == name) {
            errors.push(err(
                span_line(z.name.span()),
                format!("zone `{name}` configured twice"),
            ));
            continue;
        }
        let file_path = match &z.file {
            Some(f) if f.get_ref().is_empty() => {
                errors.push(err(span_line(f.span()), format!("zone `{name}`: empty file name")));
                continue;
            }
            Some(f) => {
                let raw = Path::new(f.get_ref());
                Some(if raw.is_absolute() { raw.to_path_buf() } else { base.join(raw) })
            }
            None => None,
        };
        let key = match &z.key {
            None => None,
            Some(k) => {
                let want = k.get_ref().trim().trim_end_matches('.').to_ascii_lowercase() + ".";
                match keys.iter().find(|c| c.name == want) {
                    Some(c) => Some(c.clone()),
                    None => {
                        errors.push(err(span_line(k.span()), format!("zone `{name}`: no [[key]] named `{}`", k.get_ref())));
                        continue;
                    }
                }
            }
        };
        let mut notify = Vec::new();
        if let Some(n) = &z.notify {
            for a in n.get_ref() {
                match parse_remote(a) {
                    Some(sa) => notify.push(sa),
                    None => errors.push(err(
                        span_line(n.span()),
                        format!("zone `{name}`: notify target `{a}` is not ADDRESS or ADDRESS@PORT"),
                    )),
                }
            }
        }
        let mut allow_transfer = Vec::new();
        if let Some(a) = &z.allow_transfer {
            for p in a.get_ref() {
                match crate::recursion::Prefix::parse(p) {
                    Some(px) => allow_transfer.push(px),
                    None => errors.push(err(
                        span_line(a.span()),
                        format!("zone `{name}`: allow_transfer `{p}` is not ADDRESS/LENGTH or ADDRESS"),
                    )),
                }
            }
        }
        if !notify.is_empty() || !allow_transfer.is_empty() {
            outgoing.push(OutgoingConfig { name: name.clone(), notify, allow_transfer, key: key.clone() });
        }
        if let Some(p) = &z.primaries {
            let mut primaries = Vec::new();
            for a in p.get_ref() {
                match parse_remote(a) {
                    Some(sa) => primaries.push(sa),
                    None => errors.push(err(
                        span_line(p.span()),
                        format!("zone `{name}`: primary `{a}` is not ADDRESS or ADDRESS@PORT"),
                    )),
                }
            }
            if p.get_ref().is_empty() {
                errors.push(err(span_line(p.span()), format!("zone `{name}`: `primaries` is empty")));
            }
            secondaries.push(SecondaryConfig { name, primaries, key, file: file_path });
            continue;
        }
        if key.is_some() && z.notify.is_none() && z.allow_transfer.is_none() {
            errors.push(err(
                span_line(z.name.span()),
                format!("zone `{name}`: `key` needs `primaries`, `notify` or `allow_transfer`"),
            ));
            continue;
        }
        let Some(file) = file_path else {
            errors.push(err(
                span_line(z.name.span()),
                format!("zone `{name}`: `file` is required (or `primaries`, for a secondary)"),
            ));
            continue;
        };
        if !file.is_file() {
            errors.push(err(
                z.file.as_ref().and_then(|f| span_line(f.span())),
                format!("zone `{name}`: file {} not found", file.display()),
            ));
            continue;
        }
        zones.push(ZoneSource { name, file });
    }

    let mut catalogs: Vec<SecondaryConfig> = Vec::new();
    for c in &file.catalog {
        let line = span_line(c.span());
        let cc = c.get_ref();
        let Some(name) = normalize_zone_name(&cc.name) else {
            errors.push(err(line, format!("bad catalog name `{}`", cc.name)));
            continue;
        };
        if zones.iter().any(|z| z.name == name) || secondaries.iter().any(|z| z.name == name) || catalogs.iter().any(|z| z.name == name) {
            errors.push(err(line, format!("catalog `{name}` configured twice (or also as a zone)")));
            continue;
        }
        let primaries: Vec<SocketAddr> = cc.primaries.iter().filter_map(|a| parse_remote(a)).collect();
        if primaries.len() != cc.primaries.len() || primaries.is_empty() {
            errors.push(err(line, format!("catalog `{name}`: `primaries` must be ADDRESS or ADDRESS@PORT, at least one")));
            continue;
        }
        let key = match &cc.key {
            None => None,
            Some(k) => {
                let want = k.trim().trim_end_matches('.').to_ascii_lowercase() + ".";
                match keys.iter().find(|c| c.name == want) {
                    Some(c) => Some(c.clone()),
                    None => {
                        errors.push(err(line, format!("catalog `{name}`: no [[key]] named `{k}`")));
                        continue;
                    }
                }
            }
        };
        let file = cc.file.as_ref().map(|f| if Path::new(f).is_absolute() { PathBuf::from(f) } else { base.join(f) });
        catalogs.push(SecondaryConfig { name, primaries, key, file });
    }

    let resolver = file.resolver.as_ref().and_then(|r| {
        let line_fn = |s: std::ops::Range<usize>| span_line(s);
        let r = r.get_ref();
        crate::recursion::parse_section(r, &base, &err, &line_fn, &mut errors)
    });

    let mut control = file
        .control
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_CONTROL));
    if control.as_os_str().is_empty() {
        errors.push(err(None, "`control` must not be empty".into()));
    }

    if !over.listen.is_empty() {
        listen = over.listen.clone();
    }
    if let Some(c) = &over.control {
        control = c.clone();
    }
    let metrics = over.metrics.or(metrics);
    if let Some(w) = over.udp_workers {
        udp_workers = w;
    }
    let mut log = log;
    if let Some(l) = &over.log_level {
        log.level = l.clone();
    }

    let guard = file.guard.map(|g| crate::guard::settings(g, &base, &err, &span_line, &mut errors));
    if guard.as_ref().is_some_and(|g| g.detect.is_some()) && file.xdp.interfaces.is_empty() {
        // the features the detector reads are counted by the XDP program
        errors.push(err(None, "[guard] detect = true needs [xdp] interfaces (the kernel counts the traffic it reads)".into()));
    }
    let inpath = file.inpath.as_ref().and_then(|i| {
        crate::inpath::parse_section(i.get_ref(), span_line(i.span()), &err, &span_line, &mut errors)
    });
    let dnstap = file.dnstap.and_then(|d| crate::dnstap::settings(d, &base, &err, &span_line, &mut errors));
    let mut telemetry = Vec::new();
    for r in file.telemetry.map(|t| t.rules).unwrap_or_default() {
        match xdns_bpf::telemetry::Rule::parse(r.get_ref()) {
            Ok(rule) => telemetry.push(rule),
            Err(e) => errors.push(err(span_line(r.span()), format!("telemetry rule: {e:#}"))),
        }
    }
    if telemetry.len() > xdns_bpf::telemetry::MAX_RULES {
        errors.push(err(None, format!("[telemetry] has {} rules, at most {}", telemetry.len(), xdns_bpf::telemetry::MAX_RULES)));
    }
    let run_as = match (&file.user, &file.group) {
        (Some(u), g) => match crate::privilege::resolve(u.get_ref(), g.as_ref().map(|g| g.get_ref().as_str())) {
            Ok(r) => Some(r),
            Err(reason) => {
                errors.push(err(span_line(u.span()), reason));
                None
            }
        },
        (None, Some(g)) => {
            errors.push(err(span_line(g.span()), "group is set without user".into()));
            None
        }
        (None, None) => None,
    };

    if !errors.is_empty() {
        return Err(errors);
    }
    Ok(Config {
        path: path.to_path_buf(),
        listen,
        control,
        metrics,
        edns_payload,
        udp_workers,
        tcp,
        log,
        xdp: file.xdp,
        zones,
        resolver,
        run_as,
        guard,
        inpath,
        telemetry,
        keys,
        secondaries,
        outgoing,
        catalogs,
        dnstap,
    })
}

/// `ADDRESS@PORT` (Knot's form) or `ADDRESS` (port 53); `[v6]:port` is accepted too.
pub fn parse_remote(text: &str) -> Option<SocketAddr> {
    let t = text.trim();
    if let Some((a, p)) = t.rsplit_once('@') {
        let port: u16 = p.parse().ok().filter(|&p| p != 0)?;
        return Some(SocketAddr::new(a.parse().ok()?, port));
    }
    if let Ok(ip) = t.parse::<std::net::IpAddr>() {
        return Some(SocketAddr::new(ip, 53));
    }
    t.parse::<SocketAddr>().ok().filter(|a| a.port() != 0)
}

/// Only the control socket path of the configuration at `path` (for `xdns stats`): the rest
/// of the file is not validated, so a missing zone file does not stop reading counters.
pub fn control_path(path: &Path) -> Result<PathBuf, ConfigError> {
    let err = |line: Option<usize>, reason: String| ConfigError {
        file: path.to_path_buf(),
        line,
        reason,
    };
    let text = std::fs::read_to_string(path).map_err(|e| err(None, format!("cannot read: {e}")))?;
    let table: toml::Table = toml::from_str(&text).map_err(|e| {
        let line = e.span().map(|s| line_of(&text, s.start));
        err(line, e.message().trim().to_string())
    })?;
    match table.get("control") {
        None => Ok(PathBuf::from(DEFAULT_CONTROL)),
        Some(toml::Value::String(s)) if !s.is_empty() => Ok(PathBuf::from(s)),
        Some(_) => Err(err(None, "`control` must be a non-empty string".into())),
    }
}

impl Config {
    /// UDP worker threads per listen address, resolving 0 to the number of cores.
    pub fn effective_udp_workers(&self) -> usize {
        if self.udp_workers > 0 {
            return self.udp_workers;
        }
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A temp dir holding a zone file `z.zone`, removed on drop.
    struct Dir(PathBuf);
    impl Dir {
        fn new(tag: &str) -> Self {
            let d = std::env::temp_dir().join(format!("xdns-config-{tag}-{}", std::process::id()));
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("z.zone"), "@ 3600 IN SOA a. b. 1 2 3 4 5\n").unwrap();
            Dir(d)
        }
        fn cfg(&self) -> PathBuf {
            self.0.join("xdns.toml")
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn good_configs() {
        let d = Dir::new("good");
        let full = r#"
listen = ["198.18.0.5:53", "[2001:db8::5]:53"]
control = "/tmp/x.sock"
metrics = "198.18.0.5:9153"
edns_payload = 1400
udp_workers = 3
[tcp]
idle_timeout_ms = 500
idle_min_ms = 100
max_connections = 7
max_per_client = 3
io_timeout_ms = 250
max_pipelined = 9
[log]
level = "debug"
[xdp]
interfaces = []
mode = "auto"
[[zone]]
name = "Example.COM"
file = "z.zone"
"#;
        let c = parse(full, &d.cfg(), &Overrides::default()).unwrap();
        assert_eq!(
            c.listen,
            vec![
                "198.18.0.5:53".parse().unwrap(),
                "[2001:db8::5]:53".parse().unwrap()
            ]
        );
        assert_eq!(c.control, PathBuf::from("/tmp/x.sock"));
        assert_eq!(c.metrics, Some("198.18.0.5:9153".parse().unwrap()));
        assert_eq!(c.edns_payload, 1400);
        assert_eq!(c.udp_workers, 3);
        assert_eq!(
            c.tcp,
            TcpConfig {
                idle_timeout_ms: 500,
                idle_min_ms: 100,
                max_connections: 7,
                max_per_client: 3,
                io_timeout_ms: 250,
                max_pipelined: 9
            }
        );
        assert_eq!(c.log.level, "debug");
        assert_eq!(
            c.zones,
            vec![ZoneSource {
                name: "example.com.".into(),
                file: d.0.join("z.zone")
            }]
        );

        let empty = parse("", &d.cfg(), &Overrides::default()).unwrap();
        assert_eq!(empty.listen, default_listen());
        assert_eq!(empty.control, PathBuf::from(DEFAULT_CONTROL));
        assert_eq!(empty.edns_payload, DEFAULT_EDNS_PAYLOAD);
        assert_eq!(empty.tcp, TcpConfig::default());
        assert!(empty.zones.is_empty());
        assert_eq!(empty.metrics, None);

        let partial_tcp = parse(
            "[tcp]\nmax_pipelined = 2\n",
            &d.cfg(),
            &Overrides::default(),
        )
        .unwrap();
        assert_eq!(partial_tcp.tcp.max_pipelined, 2);
        assert_eq!(partial_tcp.tcp.idle_timeout_ms, 10_000);
    }

    #[test]
    fn overrides_win() {
        let d = Dir::new("over");
        let over = Overrides {
            listen: vec!["127.0.0.1:5353".parse().unwrap()],
            control: Some("/tmp/o.sock".into()),
            metrics: Some("127.0.0.1:9999".parse().unwrap()),
            udp_workers: Some(1),
            log_level: Some("warn".into()),
        };
        let c = parse(
            "listen = [\"127.0.0.2:53\"]\nudp_workers = 4\n",
            &d.cfg(),
            &over,
        )
        .unwrap();
        assert_eq!(c.listen, over.listen);
        assert_eq!(c.control, PathBuf::from("/tmp/o.sock"));
        assert_eq!(c.metrics, over.metrics);
        assert_eq!(c.udp_workers, 1);
        assert_eq!(c.log.level, "warn");
    }

    #[test]
    fn bad_configs_name_key_and_line() {
        let d = Dir::new("bad");
        // (config text, expected line, text the reason must contain)
        let table: &[(&str, Option<usize>, &str)] = &[
            ("listen = [\"127.0.0.1:53\"]\nbogus = 1\n", Some(2), "bogus"),
            ("[tcp]\nidle_timeout_ms = 5\nmax_conns = 3\n", Some(3), "max_conns"),
            ("[log]\nlevel = \"info\"\ncolour = true\n", Some(3), "colour"),
            ("[[zone]]\nname = \"a.\"\nfile = \"z.zone\"\nview = 1\n", Some(4), "view"),
            ("[xdp]\ninterfaces = []\nturbo = true\n", Some(3), "turbo"),
            ("listen = [\"127.0.0.1:53\",\n  \"not-an-address\"]\n", Some(2), "not-an-address"),
            ("listen = [\"127.0.0.1\"]\n", Some(1), "127.0.0.1"),
            ("listen = [\"127.0.0.1:0\"]\n", Some(1), "port"),
            ("\nmetrics = \"nope\"\n", Some(2), "nope"),
            ("edns_payload = 100\n", Some(1), "edns_payload"),
            ("udp_workers = -1\n", Some(1), "udp_workers"),
            ("[tcp]\nmax_pipelined = 0\n", Some(1), "max_pipelined"),
            ("[tcp]\nidle_min_ms = 0\n", Some(1), "idle_min_ms"),
            ("[tcp]\nmax_per_client = 0\n", Some(1), "max_per_client"),
            ("[log]\nlevel = \"a=b=c=\"\n", Some(1), "level"),
            ("\n\n[[zone]]\nname = \"a.\"\nfile = \"missing.zone\"\n", Some(5), "missing.zone"),
            ("[[zone]]\nname = \"a..b\"\nfile = \"z.zone\"\n", Some(2), "a..b"),
            ("[[zone]]\nname = \"a.\"\nfile = \"z.zone\"\n[[zone]]\nname = \"A\"\nfile = \"z.zone\"\n", Some(5), "twice"),
            ("[[zone]]\nname = \"a.\"\n", Some(2), "file"),
            ("listen = 5\n", Some(1), "sequence"),
            ("listen = [\n", Some(1), "array"),
            ("[xdp]\nmode = \"fast\"\n", Some(2), "fast"),
            ("[guard]\ncookies = true\ncookie_secret_lifetime = \"0\"\n", Some(3), "cookie_secret_lifetime"),
            ("[guard]\ncookie_secret_lifetime = \"1w\"\n", Some(2), "unit"),
            ("\n[[key]]\nname = \"k\"\nalgorithm = \"hmac-md5\"\nsecret = \"AAAA\"\n", Some(2), "hmac-md5"),
            ("[[key]]\nname = \"k\"\nalgorithm = \"hmac-sha256\"\nsecret = \"%%%\"\n", Some(1), "base64"),
            ("[[key]]\nname = \"k\"\nalgorithm = \"hmac-sha256\"\nsecret = \"AAAA\"\nsize = 1\n", Some(5), "size"),
            ("[[zone]]\nname = \"a.\"\nprimaries = [\"198.18.0.1@53\"]\nkey = \"nokey\"\n", Some(4), "nokey"),
            ("[[zone]]\nname = \"a.\"\nprimaries = [\"198.18.0.1@x\"]\n", Some(3), "198.18.0.1@x"),
            ("[[zone]]\nname = \"a.\"\nprimaries = []\n", Some(3), "empty"),
            ("[[key]]\nname = \"k\"\nalgorithm = \"hmac-sha256\"\nsecret = \"AAAA\"\n[[zone]]\nname = \"a.\"\nfile = \"z.zone\"\nkey = \"k\"\n", Some(6), "allow_transfer"),
            ("[[zone]]\nname = \"a.\"\nfile = \"z.zone\"\nallow_transfer = [\"198.18.0.0/33\"]\n", Some(4), "198.18.0.0/33"),
            ("[[zone]]\nname = \"a.\"\nfile = \"z.zone\"\nnotify = [\"nowhere\"]\n", Some(4), "nowhere"),
        ];
        for (text, line, needle) in table {
            let errs = parse(text, &d.cfg(), &Overrides::default()).expect_err(text);
            let e = &errs[0];
            assert_eq!(e.file, d.cfg(), "{text}");
            assert_eq!(e.line, *line, "{text}: {e}");
            assert!(e.reason.contains(needle), "{text}: {e}");
            let shown = e.to_string();
            assert!(
                shown.starts_with(&format!("{}:", d.cfg().display())),
                "{shown}"
            );
        }
    }

    /// `[[key]]` and a secondary `[[zone]]`: primaries as Knot writes them, the key found by
    /// name in any case, `file` optional and allowed not to exist yet.
    #[test]
    fn secondary_zones_and_keys() {
        let d = Dir::new("sec");
        let text = "[[key]]\nname = \"XFR\"\nalgorithm = \"hmac-sha512\"\nsecret = \"c2VjcmV0\"\n\
                    [[zone]]\nname = \"b.\"\nprimaries = [\"198.18.0.3@5353\", \"2001:db8::3\", \"[2001:db8::4]:54\"]\nkey = \"xfr.\"\nfile = \"cache/b.zone\"\n\
                    [[zone]]\nname = \"c.\"\nprimaries = [\"198.18.0.3\"]\n";
        let c = parse(text, &d.cfg(), &Overrides::default()).unwrap();
        assert!(c.zones.is_empty());
        assert_eq!(c.keys.len(), 1);
        assert_eq!(c.keys[0].secret, b"secret");
        let b = &c.secondaries[0];
        assert_eq!(b.name, "b.");
        let want: Vec<SocketAddr> =
            vec!["198.18.0.3:5353".parse().unwrap(), "[2001:db8::3]:53".parse().unwrap(), "[2001:db8::4]:54".parse().unwrap()];
        assert_eq!(b.primaries, want);
        assert_eq!(b.key.as_ref().map(|k| k.name.as_str()), Some("xfr."));
        assert_eq!(b.file, Some(d.0.join("cache/b.zone")));
        assert_eq!((c.secondaries[1].key.is_none(), c.secondaries[1].file.is_none()), (true, true));
    }

    #[test]
    fn several_errors_are_all_reported() {
        let d = Dir::new("many");
        let text = "listen = [\"x\", \"y\"]\nmetrics = \"z\"\n";
        let errs = parse(text, &d.cfg(), &Overrides::default()).unwrap_err();
        assert_eq!(errs.len(), 3);
        assert_eq!(errs[2].line, Some(2));
    }

    #[test]
    fn zone_names() {
        let table = [
            ("example.com", Some("example.com.")),
            ("Example.COM.", Some("example.com.")),
            (".", Some(".")),
            ("", None),
            ("a..b", None),
            ("bad name", None),
            (&*"x".repeat(64), None),
        ];
        for (input, want) in table {
            assert_eq!(normalize_zone_name(input).as_deref(), want, "{input}");
        }
    }

    #[test]
    fn control_path_ignores_the_rest() {
        let d = Dir::new("ctl");
        let table: &[(&str, Result<&str, &str>)] = &[
            (
                "control = \"/tmp/a.sock\"\n[[zone]]\nname = \"x.\"\nfile = \"gone.zone\"\n",
                Ok("/tmp/a.sock"),
            ),
            ("listen = [\"bad\"]\n", Ok(DEFAULT_CONTROL)),
            ("control = 5\n", Err("non-empty string")),
            ("control = \n", Err("")),
        ];
        for (text, want) in table {
            std::fs::write(d.cfg(), text).unwrap();
            match (control_path(&d.cfg()), want) {
                (Ok(p), Ok(w)) => assert_eq!(p, PathBuf::from(w), "{text}"),
                (Err(e), Err(w)) => {
                    assert!(e.reason.contains(w) && e.file == d.cfg(), "{text}: {e}")
                }
                (got, _) => panic!("{text}: unexpected {got:?}"),
            }
        }
    }

    #[test]
    fn line_numbers() {
        assert_eq!(line_of("a\nb\nc", 0), 1);
        assert_eq!(line_of("a\nb\nc", 2), 2);
        assert_eq!(line_of("a\nb\nc", 99), 3);
    }

    #[test]
    fn unreadable_file() {
        let errs = load(Path::new("/nonexistent/xdns.toml"), &Overrides::default()).unwrap_err();
        assert!(errs[0]
            .to_string()
            .starts_with("/nonexistent/xdns.toml: cannot read"));
    }
}
