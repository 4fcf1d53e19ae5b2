//! `[inpath]`: the transparent in-path DNS cache on a forwarding host (issue 26).
//!
//! The daemon's side of `bpf/inpath.bpf.c` (loaded by [`xdns_bpf::inpath`]): the section's
//! settings, the running cache (attached at start, detached at stop; a crash closes the
//! links and detaches it too), its counters as `xdns stats` / `/metrics` groups, `xdns flush`,
//! and a sweep of expired entries once a second (at most 64k entries of each class's map read
//! per second, going on where the last stopped, so that its cost does not grow with the
//! capacity: an expired entry of a larger cache waits a few seconds, counted as `expired`).
//!
//! Groups: `inpath` (every verdict of the program, evictions, redirects, flushes: counters)
//! and `inpath_cache` (entries, expired entries not yet swept, capacity, bytes: gauges).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use serde::Deserialize;
use toml::Spanned;
use xdns_bpf::inpath::{InpathProgram, InpathSettings, InpathView, ROLE_CLIENT, ROLE_UPSTREAM};
use xdns_bpf::runtime::AttachMode;

use crate::config::ConfigError;
use crate::recursion::Prefix;
use crate::stats::{Group, GroupMeta, Snapshot};
use crate::xdp::XdpMode;

/// `[inpath]` as written in the file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileInpath {
    client_interfaces: Option<Spanned<Vec<String>>>,
    upstream_interfaces: Option<Spanned<Vec<String>>>,
    servers: Option<Spanned<Vec<String>>>,
    max_ttl: Option<Spanned<i64>>,
    capacity: Option<Spanned<i64>>,
    pending: Option<Spanned<i64>>,
    timeout_ms: Option<Spanned<i64>>,
    forward: Option<Spanned<String>>,
    mode: Option<XdpMode>,
}

/// `[inpath]`, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InpathConfig {
    /// Queries arrive here; hits are answered here.
    pub client_interfaces: Vec<String>,
    /// The servers' responses arrive here.
    pub upstream_interfaces: Vec<String>,
    /// The program's settings (servers, sizes, timeout, forwarding).
    pub settings: InpathSettings,
    /// How the program is attached.
    pub mode: XdpMode,
}

/// Parse `[inpath]`, pushing every error (`FILE:LINE: reason` through `err`).
pub fn parse_section(
    f: &FileInpath,
    section_line: Option<usize>,
    err: &dyn Fn(Option<usize>, String) -> ConfigError,
    line: &dyn Fn(std::ops::Range<usize>) -> Option<usize>,
    errors: &mut Vec<ConfigError>,
) -> Option<InpathConfig> {
    let before = errors.len();
    let list = |v: &Option<Spanned<Vec<String>>>, key: &str, errors: &mut Vec<ConfigError>| -> Vec<String> {
        match v {
            None => {
                errors.push(err(section_line, format!("[inpath] {key} is required (at least one)")));
                Vec::new()
            }
            Some(l) if l.get_ref().is_empty() || l.get_ref().iter().any(|s| s.is_empty()) => {
                errors.push(err(line(l.span()), format!("[inpath] {key}: at least one, none empty")));
                Vec::new()
            }
            Some(l) => l.get_ref().clone(),
        }
    };
    let client_interfaces = list(&f.client_interfaces, "client_interfaces", errors);
    let upstream_interfaces = list(&f.upstream_interfaces, "upstream_interfaces", errors);
    let mut servers = Vec::new();
    match &f.servers {
        None => errors.push(err(section_line, "[inpath] servers is required: the server prefixes whose answers are cached".into())),
        Some(s) if s.get_ref().is_empty() => errors.push(err(line(s.span()), "[inpath] servers: at least one prefix".into())),
        Some(s) => {
            for p in s.get_ref() {
                match Prefix::parse(p) {
                    Some(p) => servers.push(p.parts()),
                    None => errors.push(err(line(s.span()), format!("[inpath] servers: `{p}` is no ADDR or ADDR/LEN"))),
                }
            }
            if servers.len() > 256 {
                errors.push(err(line(s.span()), "[inpath] servers: at most 256 prefixes".into()));
            }
        }
    }
    let d = InpathSettings::default();
    let mut num = |v: &Option<Spanned<i64>>, key: &str, min: i64, max: i64, default: u32| -> u32 {
        match v {
            None => default,
            Some(n) if (min..=max).contains(n.get_ref()) => *n.get_ref() as u32,
            Some(n) => {
                errors.push(err(line(n.span()), format!("[inpath] {key} must be {min} to {max}")));
                default
            }
        }
    };
    let max_ttl = num(&f.max_ttl, "max_ttl", 1, 604_800, d.max_ttl);
    let capacity = num(&f.capacity, "capacity", 4, 1 << 24, d.capacity);
    let pending = num(&f.pending, "pending", 64, 1 << 24, d.pending);
    let timeout_ms = num(&f.timeout_ms, "timeout_ms", 1, 60_000, d.timeout_ms);
    let redirect = match &f.forward {
        None => false,
        Some(s) => match s.get_ref().as_str() {
            "pass" => false,
            "redirect" => true,
            other => {
                errors.push(err(line(s.span()), format!("[inpath] forward must be \"pass\" or \"redirect\", not `{other}`")));
                false
            }
        },
    };
    if errors.len() != before {
        return None;
    }
    Some(InpathConfig {
        client_interfaces,
        upstream_interfaces,
        settings: InpathSettings { servers, max_ttl, capacity, pending, timeout_ms, redirect },
        mode: f.mode.unwrap_or_default(),
    })
}

/// The running in-path cache: the program (its links inside), and the daemon's own counts.
pub struct Inpath {
    view: Box<dyn InpathView>,
    /// Held to keep the links (the program detaches when this is dropped).
    program: Mutex<Option<InpathProgram>>,
    flushes: AtomicU64,
    flushed: AtomicU64,
    swept: AtomicU64,
}

impl Inpath {
    /// Load the program and attach it to every interface of `cfg` (root needed).
    pub fn start(cfg: &InpathConfig) -> anyhow::Result<Self> {
        let mut prog = InpathProgram::load(&cfg.settings)?;
        let mode = match cfg.mode {
            XdpMode::Native => AttachMode::Native,
            XdpMode::Generic => AttachMode::Generic,
            XdpMode::Auto => AttachMode::Auto,
        };
        for (list, role) in [(&cfg.client_interfaces, ROLE_CLIENT), (&cfg.upstream_interfaces, ROLE_UPSTREAM)] {
            for ifname in list {
                let how = prog.attach(ifname, role, mode)?;
                tracing::info!(interface = %ifname, role = if role == ROLE_CLIENT { "client" } else { "upstream" }, mode = how, "in-path cache attached");
            }
        }
        tracing::info!(
            verified_insns = prog.verified_insns(),
            capacity = cfg.settings.sets() * xdns_bpf::inpath::WAYS,
            redirect = cfg.settings.redirect,
            "in-path cache loaded"
        );
        // a second handle on the same maps for the readers: the program keeps the links
        let view = InpathHandle::new(&prog)?;
        Ok(Self::with_view(Box::new(view), Some(prog)))
    }

    /// Over any view (tests use an in-memory one).
    pub fn with_view(view: Box<dyn InpathView>, program: Option<InpathProgram>) -> Self {
        Self {
            view,
            program: Mutex::new(program),
            flushes: AtomicU64::new(0),
            flushed: AtomicU64::new(0),
            swept: AtomicU64::new(0),
        }
    }

    /// `xdns flush`: forget every entry; the reply's count.
    pub fn flush(&self) -> anyhow::Result<usize> {
        let n = self.view.flush()?;
        self.flushes.fetch_add(1, Ordering::Relaxed);
        self.flushed.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }

    /// Delete the expired entries (once a second from the daemon).
    pub fn sweep(&self) {
        match self.view.sweep() {
            Ok(n) => {
                self.swept.fetch_add(n as u64, Ordering::Relaxed);
            }
            Err(e) => tracing::warn!("in-path cache sweep: {e:#}"),
        }
    }

    /// Detach (SIGTERM): the host forwards as before.
    pub fn stop(&self) {
        if let Some(mut p) = self.program.lock().unwrap_or_else(|e| e.into_inner()).take() {
            p.detach_all();
        }
    }

    /// Add the groups `inpath` and `inpath_cache`.
    pub fn snapshot(&self, s: &mut Snapshot) {
        let mut values: Vec<(String, u64)> = Vec::new();
        match self.view.counters() {
            Ok(c) => {
                values.extend(c.verdicts);
                values.push(("evicted".into(), c.evicted));
                values.push(("redirected".into(), c.redirected));
                values.push(("fib_passed".into(), c.fib_passed));
                values.push(("head_grown".into(), c.head_grown));
                values.push(("reply_hits".into(), c.reply_hits));
                values.push(("reply_kept".into(), c.reply_kept));
            }
            Err(e) => tracing::warn!("in-path counters: {e:#}"),
        }
        values.push(("flushes".into(), self.flushes.load(Ordering::Relaxed)));
        values.push(("flushed".into(), self.flushed.load(Ordering::Relaxed)));
        values.push(("swept".into(), self.swept.load(Ordering::Relaxed)));
        s.groups.insert(
            "inpath".into(),
            Group::counters("In-path cache: packets by outcome, evictions, forwarding, flushes.", "counter", values),
        );
        if let Ok(e) = self.view.entries() {
            s.groups.insert(
                "inpath_cache".into(),
                Group {
                    values: [
                        ("entries".to_string(), e.live),
                        ("expired".to_string(), e.expired),
                        ("capacity".to_string(), e.capacity),
                        ("entry_bytes".to_string(), e.entry_bytes),
                        ("small_entry_bytes".to_string(), e.small_entry_bytes),
                        ("small_entries".to_string(), e.small),
                        ("large_entries".to_string(), e.large),
                        // each a hash map element, from the kernel's size class of value + 64
                        ("memory_bytes".to_string(), e.memory_bytes),
                    ]
                    .into_iter()
                    .collect(),
                    meta: GroupMeta { help: "In-path cache: entries and memory.", label: "gauge", gauge: true },
                },
            );
        }
    }
}

/// A reader's handle: the program's maps, without its links.
struct InpathHandle(InpathProgram);

impl InpathHandle {
    fn new(p: &InpathProgram) -> anyhow::Result<Self> {
        Ok(Self(p.reader()?))
    }
}

impl InpathView for InpathHandle {
    fn counters(&self) -> anyhow::Result<xdns_bpf::inpath::InpathCounters> {
        self.0.counters()
    }
    fn entries(&self) -> anyhow::Result<xdns_bpf::inpath::InpathEntries> {
        self.0.entries()
    }
    fn flush(&self) -> anyhow::Result<usize> {
        self.0.flush()
    }
    fn sweep(&self) -> anyhow::Result<usize> {
        self.0.sweep()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{parse, Overrides};
    use std::sync::Arc;
    use xdns_bpf::inpath::{InpathCounters, InpathEntries};

    fn cfg(text: &str) -> Result<crate::config::Config, Vec<ConfigError>> {
        parse(text, std::path::Path::new("/tmp/x.toml"), &Overrides::default())
    }

    #[test]
    fn section_alone_is_a_configuration() {
        let c = cfg("[inpath]\nclient_interfaces = [\"eth0\"]\nupstream_interfaces = [\"eth1\"]\nservers = [\"198.18.0.0/15\", \"2001:db8::53\"]\nmax_ttl = 600\nforward = \"redirect\"\n").unwrap();
        let i = c.inpath.unwrap();
        assert_eq!(i.client_interfaces, ["eth0"]);
        assert_eq!(i.settings.servers.len(), 2);
        assert_eq!(i.settings.servers[1].1, 128);
        assert_eq!(i.settings.max_ttl, 600);
        assert!(i.settings.redirect);
        assert_eq!(i.settings.capacity, 65536);
        assert!(c.zones.is_empty() && c.resolver.is_none());
    }

    #[test]
    fn bad_sections_name_line_and_reason() {
        let table: &[(&str, usize, &str)] = &[
            ("[inpath]\nupstream_interfaces = [\"b\"]\nservers = [\"198.18.0.1\"]\n", 1, "client_interfaces is required"),
            ("[inpath]\nclient_interfaces = []\nupstream_interfaces = [\"b\"]\nservers = [\"198.18.0.1\"]\n", 2, "client_interfaces"),
            ("[inpath]\nclient_interfaces = [\"a\"]\nupstream_interfaces = [\"b\"]\nservers = [\"198.18.0.1/33\"]\n", 4, "is no ADDR"),
            ("[inpath]\nclient_interfaces = [\"a\"]\nupstream_interfaces = [\"b\"]\nservers = [\"x\"]\nmax_ttl = 0\n", 4, "is no ADDR"),
            ("[inpath]\nclient_interfaces = [\"a\"]\nupstream_interfaces = [\"b\"]\nservers = [\"198.18.0.1\"]\nmax_ttl = 0\n", 5, "max_ttl must be"),
            ("[inpath]\nclient_interfaces = [\"a\"]\nupstream_interfaces = [\"b\"]\nservers = [\"198.18.0.1\"]\ncapacity = 1\n", 5, "capacity must be"),
            ("[inpath]\nclient_interfaces = [\"a\"]\nupstream_interfaces = [\"b\"]\nservers = [\"198.18.0.1\"]\nforward = \"teleport\"\n", 5, "forward must be"),
            ("[inpath]\nclient_interfaces = [\"a\"]\nupstream_interfaces = [\"b\"]\nservers = [\"198.18.0.1\"]\nbogus = 1\n", 5, "unknown field"),
        ];
        for (text, line, needle) in table {
            let errs = cfg(text).unwrap_err();
            let e = &errs[0];
            assert_eq!(e.line, Some(*line), "{text}: {e}");
            assert!(e.reason.contains(needle), "{text}: {e}");
        }
    }

    #[derive(Default)]
    struct FakeState {
        entries: Mutex<u64>,
    }

    struct Fake(Arc<FakeState>);

    impl std::ops::Deref for Fake {
        type Target = FakeState;
        fn deref(&self) -> &FakeState {
            &self.0
        }
    }

    impl InpathView for Fake {
        fn counters(&self) -> anyhow::Result<InpathCounters> {
            Ok(InpathCounters { verdicts: vec![("answered".into(), 7), ("learned".into(), 2)], evicted: 1, redirected: 0, fib_passed: 0, head_grown: 0, ..Default::default() })
        }
        fn entries(&self) -> anyhow::Result<InpathEntries> {
            let live = *self.entries.lock().unwrap();
            Ok(InpathEntries {
                live,
                expired: 0,
                capacity: 8,
                entry_bytes: 1368,
                small_entry_bytes: 448,
                small: live,
                large: 0,
                memory_bytes: live * xdns_bpf::inpath::element_bytes(448),
            })
        }
        fn flush(&self) -> anyhow::Result<usize> {
            Ok(std::mem::take(&mut *self.entries.lock().unwrap()) as usize)
        }
        fn sweep(&self) -> anyhow::Result<usize> {
            Ok(0)
        }
    }

    #[test]
    fn groups_and_flush() {
        let fake = Arc::new(FakeState { entries: Mutex::new(3) });
        let ip = Inpath::with_view(Box::new(Fake(fake.clone())), None);
        let mut s = Snapshot::default();
        ip.snapshot(&mut s);
        assert_eq!(s.groups["inpath"].values["answered"], 7);
        assert_eq!(s.groups["inpath"].values["evicted"], 1);
        assert_eq!(s.groups["inpath_cache"].values["entries"], 3);
        assert_eq!(s.groups["inpath_cache"].values["memory_bytes"], 3 * 512);
        assert_eq!(s.groups["inpath_cache"].values["small_entries"], 3);
        assert!(s.groups["inpath_cache"].meta.gauge);
        assert_eq!(ip.flush().unwrap(), 3);
        let mut s = Snapshot::default();
        ip.snapshot(&mut s);
        assert_eq!(s.groups["inpath_cache"].values["entries"], 0);
        assert_eq!(s.groups["inpath"].values["flushes"], 1);
        assert_eq!(s.groups["inpath"].values["flushed"], 3);
    }
}
