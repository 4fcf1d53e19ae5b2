//! Loading the served state: every zone of a configuration, aside from what is being served.
//!
//! [`build`] loads each configured zone; a zone that fails keeps its previous version (when
//! there is one) so a broken edit never takes a zone offline. The result is a new [`Served`]
//! that the server swaps in atomically. A loader panic is caught and reported as an error of
//! that zone, so a bug in one zone file's handling cannot stop the server.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use xdns_zone::{LoadError, RespondConfig, Zone, ZoneSet, ZoneSource};

use crate::config::Config;
use crate::stats::ZoneInfo;

/// One zone being served, with where it came from.
#[derive(Clone, Debug)]
pub struct LoadedZone {
    /// Name and file from the configuration.
    pub source: ZoneSource,
    /// The zone data.
    pub zone: Arc<Zone>,
    /// Differences between the versions loaded before this one, oldest first, for IXFR out
    /// (empty unless the zone has `notify` or `allow_transfer`).
    pub journal: Arc<Vec<crate::xfr::client::Diff>>,
}

/// Everything a query needs, swapped as one unit on reload.
#[derive(Debug, Default)]
pub struct Served {
    /// The zones answered from.
    pub zones: Arc<ZoneSet>,
    /// The zones in configuration order, for logs and stats.
    pub loaded: Vec<LoadedZone>,
    /// Answer settings.
    pub respond: RespondConfig,
    /// Apexes of secondary zones past their expire time: kept in `loaded`, left out of
    /// `zones`, answered SERVFAIL (`crate::xfr::notify::expired`).
    pub expired: Vec<xdns_zone::NameKey>,
    /// The secondary zones (fixed until a restart; carried from one version to the next).
    pub xfr: Option<Arc<crate::xfr::Registry>>,
    /// The primary side of zones (`notify`, `allow_transfer`, `key`), by apex.
    pub outgoing: Arc<hashbrown::HashMap<xdns_zone::NameKey, Arc<crate::xfr::primary::OutgoingConfig>>>,
}

impl Served {
    /// This state with other zones: the set answered from is `loaded` but the `expired`.
    pub fn with(&self, loaded: Vec<LoadedZone>, expired: Vec<xdns_zone::NameKey>) -> Served {
        let mut set = ZoneSet::default();
        for l in &loaded {
            if !expired.contains(&l.zone.apex) {
                set.zones.insert(l.zone.apex.clone(), l.zone.clone());
            }
        }
        Served {
            zones: Arc::new(set),
            loaded,
            respond: self.respond.clone(),
            expired,
            xfr: self.xfr.clone(),
            outgoing: self.outgoing.clone(),
        }
    }

    /// Name, serial and record count of every zone served.
    pub fn zone_infos(&self) -> Vec<ZoneInfo> {
        self.loaded
            .iter()
            .map(|l| zone_info(&l.source.name, &l.zone))
            .collect()
    }
}

/// What [`build`] did.
#[derive(Debug, Default)]
pub struct BuildReport {
    /// Zones freshly loaded.
    pub loaded: usize,
    /// Every error, from every zone that failed.
    pub errors: Vec<LoadError>,
    /// Names of the zones that failed and kept serving their previous version.
    pub kept_old: Vec<String>,
    /// Names of the zones that failed and are not served at all.
    pub missing: Vec<String>,
}

/// Number of records in a zone.
pub fn record_count(zone: &Zone) -> u64 {
    zone.record_count()
}

/// Stats/summary view of one zone.
pub fn zone_info(name: &str, zone: &Zone) -> ZoneInfo {
    ZoneInfo {
        name: name.to_string(),
        serial: zone.serial,
        records: record_count(zone),
        transfer: None,
    }
}

/// Load one zone, turning a loader panic into an error.
pub fn load_guarded(src: &ZoneSource) -> Result<Zone, Vec<LoadError>> {
    load_guarded_with_warnings(src).map(|l| l.zone)
}

/// [`load_guarded`], also returning the warnings (`xdns check` prints them).
pub fn load_guarded_with_warnings(src: &ZoneSource) -> Result<xdns_zone::load::Loaded, Vec<LoadError>> {
    let name = src.name.clone();
    // `xdns stats` shows the records read by this build so far (`crate::progress`)
    let last = std::cell::Cell::new(0u64);
    let progress = |n: u64| {
        crate::progress::STARTUP.add_records(n - last.replace(n));
        tracing::info!(zone = %name, records = n, "loading");
    };
    match catch_unwind(AssertUnwindSafe(|| xdns_zone::load::load_zone_with_warnings(src, Some(&progress)))) {
        Ok(r) => {
            if let Ok(l) = &r {
                crate::progress::STARTUP.add_records(l.records.saturating_sub(last.get()));
            }
            r
        }
        Err(p) => {
            let what = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown".into());
            Err(vec![LoadError {
                file: src.file.clone(),
                line: None,
                reason: format!("zone loader failed: {what}"),
            }])
        }
    }
}

/// Answer settings from `cfg`, set field by field so settings the engine adds later keep
/// their defaults.
#[allow(clippy::field_reassign_with_default)]
fn respond_config(cfg: &Config) -> RespondConfig {
    let mut r = RespondConfig::default();
    r.edns_payload = cfg.edns_payload;
    r
}

/// The journal of a freshly loaded version of zone `name` (see
/// [`crate::xfr::primary::next_journal`]).
fn journal_of(cfg: &Config, old: Option<&Served>, name: &str, zone: &Arc<Zone>) -> Arc<Vec<crate::xfr::client::Diff>> {
    let keep = cfg.outgoing.iter().any(|o| o.name == name && o.active());
    let prev = old.and_then(|o| o.loaded.iter().find(|l| l.source.name == name));
    crate::xfr::primary::next_journal(prev, zone, keep)
}

/// Load every zone of `cfg` (blocking). A zone that fails keeps its version from `old`.
pub fn build(cfg: &Config, old: Option<&Served>) -> (Served, BuildReport) {
    let mut report = BuildReport::default();
    let mut loaded = Vec::with_capacity(cfg.zones.len());
    crate::progress::STARTUP.records_loaded(0);
    for src in &cfg.zones {
        match load_guarded(src) {
            Ok(zone) => {
                report.loaded += 1;
                let zone = Arc::new(zone);
                let journal = journal_of(cfg, old, &src.name, &zone);
                loaded.push(LoadedZone {
                    source: src.clone(),
                    zone,
                    journal,
                });
            }
            Err(errs) => {
                report.errors.extend(errs);
                let prev = old.and_then(|o| o.loaded.iter().find(|l| l.source.name == src.name));
                match prev {
                    Some(p) => {
                        report.kept_old.push(src.name.clone());
                        loaded.push(LoadedZone {
                            source: src.clone(),
                            zone: p.zone.clone(),
                            journal: p.journal.clone(),
                        });
                    }
                    None => report.missing.push(src.name.clone()),
                }
            }
        }
    }
    // Secondary zones: the version served keeps serving (a reload never goes back to the
    // stored copy); at start, the stored copy is served until a primary is reached.
    let mut expired = Vec::new();
    // catalog members are not in the configuration: their versions are carried over too
    let members: Vec<crate::config::SecondaryConfig> = old
        .and_then(|o| o.xfr.as_ref())
        .map(|r| r.list().into_iter().filter(|s| matches!(s.role, crate::xfr::secondary::Role::Member(_))).map(|s| s.cfg.clone()).collect())
        .unwrap_or_default();
    for sec in cfg.secondaries.iter().chain(cfg.catalogs.iter()).chain(members.iter()) {
        if let Some(p) = old.and_then(|o| o.loaded.iter().find(|l| l.source.name == sec.name)) {
            if old.is_some_and(|o| o.expired.contains(&p.zone.apex)) {
                expired.push(p.zone.apex.clone());
            }
            loaded.push(p.clone());
            continue;
        }
        let Some(file) = sec.file.as_ref().filter(|f| f.is_file()) else {
            continue; // nothing stored: served after the first transfer
        };
        let src = ZoneSource { name: sec.name.clone(), file: file.clone() };
        match load_guarded(&src) {
            Ok(zone) => {
                report.loaded += 1;
                // older than its expire since the last contact with a primary: SERVFAIL
                // until one answers (`crate::xfr::secondary`)
                if crate::xfr::secondary::stored_expire_left(&zone, file) == Some(std::time::Duration::ZERO) {
                    expired.push(zone.apex.clone());
                }
                loaded.push(LoadedZone { source: src, zone: Arc::new(zone), journal: Arc::default() });
            }
            Err(errs) => {
                // a bad stored copy: not served until a transfer brings a good one
                report.errors.extend(errs);
                report.missing.push(sec.name.clone());
            }
        }
    }
    let outgoing = cfg
        .outgoing
        .iter()
        .filter_map(|o| Some((xdns_zone::load::text_to_key(&o.name)?, Arc::new(o.clone()))))
        .collect();
    let base = Served {
        respond: respond_config(cfg),
        outgoing: Arc::new(outgoing),
        xfr: Some(old.and_then(|o| o.xfr.clone()).unwrap_or_else(|| Arc::new(crate::xfr::Registry::new(cfg)))),
        ..Default::default()
    };
    let served = base.with(loaded, expired);
    (served, report)
}

/// Settings that only take effect after a restart (or `xdns serve --takeover`), with the
/// names of those that changed.
pub fn restart_needed(old: &Config, new: &Config) -> Vec<String> {
    let mut v: Vec<String> = Vec::new();
    let mut differs = |changed: bool, name: &str| {
        if changed {
            v.push(name.to_string());
        }
    };
    differs(old.listen != new.listen, "listen");
    differs(old.control != new.control, "control");
    differs(old.metrics != new.metrics, "metrics");
    differs(old.udp_workers != new.udp_workers, "udp_workers");
    differs(old.tcp != new.tcp, "tcp");
    differs(old.log != new.log, "log");
    differs(old.xdp != new.xdp, "xdp");
    differs(old.run_as != new.run_as, "user");
    // the kernel's guard stage is loaded with the program when [guard] is there at start
    differs(old.guard.is_some() != new.guard.is_some() && !old.xdp.interfaces.is_empty(), "guard");
    // the secondary zones' tasks and NOTIFY checks are set up at start
    differs(old.secondaries != new.secondaries, "zone primaries/key/file of secondary zones");
    differs(old.keys != new.keys, "key");
    differs(old.catalogs != new.catalogs, "catalog");
    // The XDP program's EDNS payload is read-only data fixed at load: with XDP on, a new
    // value in userspace only would make the kernel's answers and userspace's differ.
    differs(
        old.edns_payload != new.edns_payload && !old.xdp.interfaces.is_empty(),
        "edns_payload",
    );
    // The resolver and its caches live across reloads: `allow` and its tunables apply at
    // once, turning it on or off and its fixed settings need a restart.
    match (&old.resolver, &new.resolver) {
        (None, None) => {}
        (Some(a), Some(b)) => v.extend(a.restart_fields(b)),
        _ => v.push("resolver".to_string()),
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{parse, Overrides};
    use bytes::Bytes;
    use xdns_zone::{Node, Rrset};

    fn zone(serial: u32) -> Zone {
        let mut nodes = hashbrown::HashMap::new();
        let rr = |t, n: usize| Rrset {
            rtype: t,
            ttl: 60,
            rdata: (0..n).map(|i| Bytes::from(vec![i as u8])).collect(),
        };
        nodes.insert(
            b"\x01a\x00".to_vec().into_boxed_slice(),
            Node {
                rrsets: vec![rr(1, 2), rr(6, 1)],
            },
        );
        nodes.insert(
            b"\x01b\x01a\x00".to_vec().into_boxed_slice(),
            Node {
                rrsets: vec![rr(28, 3)],
            },
        );
        Zone::new(b"\x01a\x00".to_vec().into_boxed_slice(), nodes, "a.zone".into(), serial)
    }

    #[test]
    fn counts_records() {
        let z = zone(9);
        assert_eq!(record_count(&z), 6);
        assert_eq!(
            zone_info("a.", &z),
            ZoneInfo {
                name: "a.".into(),
                serial: 9,
                records: 6,
                transfer: None,
            }
        );
    }

    #[test]
    fn record_count_is_kept_and_a_clone_counts_anew() {
        // a loaded zone comes counted by its loader (no walk at each `xdns stats`)
        let dir = std::env::temp_dir().join(format!("xdns-count-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("c.zone"),
            "$ORIGIN c.\n$TTL 60\n@ SOA ns h 1 2 3 4 5\n@ NS ns\nns A 198.18.0.1\nns A 198.18.0.2\nns A 198.18.0.2\n",
        )
        .unwrap();
        let src = ZoneSource { name: "c.".into(), file: dir.join("c.zone") };
        let z = load_guarded(&src).unwrap();
        let walked: u64 = z.nodes.values().flat_map(|n| n.rrsets.iter()).map(|r| r.rdata.len() as u64).sum();
        assert_eq!((record_count(&z), walked), (4, 4), "the duplicate A is not counted");
        // a clone is made to be changed: it counts its own records
        let mut c = (*Arc::new(z)).clone();
        c.nodes.remove(&b"\x02ns\x01c\x00"[..]);
        assert_eq!(record_count(&c), 2);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn failed_zone_keeps_old_version() {
        let dir = std::env::temp_dir().join(format!("xdns-reload-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("a.zone"), "this is not a zone file (((\n").unwrap();
        let cfg = parse(
            "[[zone]]\nname = \"a.\"\nfile = \"a.zone\"\n",
            &dir.join("x.toml"),
            &Overrides::default(),
        )
        .unwrap();
        let old_zone = Arc::new(zone(41));
        let old = Served {
            zones: Arc::new(ZoneSet::default()),
            loaded: vec![LoadedZone {
                source: cfg.zones[0].clone(),
                zone: old_zone.clone(),
                journal: Arc::default(),
            }],
            respond: RespondConfig::default(),
            ..Default::default()
        };
        let (new, report) = build(&cfg, Some(&old));
        assert_eq!(report.loaded, 0);
        assert!(!report.errors.is_empty());
        assert_eq!(report.kept_old, vec!["a.".to_string()]);
        assert!(Arc::ptr_eq(&new.loaded[0].zone, &old_zone));
        assert!(new.zones.find(b"\x01x\x01a\x00").is_some());

        let (none, report) = build(&cfg, None);
        assert!(none.loaded.is_empty());
        assert_eq!(report.missing, vec!["a.".to_string()]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn zones_added_removed_and_failed() {
        let dir = std::env::temp_dir().join(format!("xdns-reload-set-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let zone = |apex: &str, serial: u32| {
            format!("$TTL 60\n@ IN SOA ns.{apex}. h.{apex}. {serial} 1 1 1 1\n@ IN NS ns\nns IN A 198.18.0.1\n")
        };
        std::fs::write(dir.join("a.zone"), zone("a", 1)).unwrap();
        std::fs::write(dir.join("b.zone"), zone("b", 2)).unwrap();
        let cfg_path = dir.join("x.toml");
        let two = "[[zone]]\nname = \"a.\"\nfile = \"a.zone\"\n[[zone]]\nname = \"b.\"\nfile = \"b.zone\"\n";
        let cfg = parse(two, &cfg_path, &Overrides::default()).unwrap();
        let (first, report) = build(&cfg, None);
        assert_eq!(report.loaded, 2, "{:?}", report.errors);
        let infos = first.zone_infos();
        assert_eq!(
            infos
                .iter()
                .map(|z| (z.name.as_str(), z.serial, z.records))
                .collect::<Vec<_>>(),
            [("a.", 1, 3), ("b.", 2, 3)]
        );
        assert!(first.zones.find(b"\x03www\x01b\x00").is_some());

        // b breaks, a is updated, c is added: a new, b old, c new.
        std::fs::write(dir.join("a.zone"), zone("a", 10)).unwrap();
        std::fs::write(dir.join("b.zone"), "@ IN SOA broken\n").unwrap();
        std::fs::write(dir.join("c.zone"), zone("c", 3)).unwrap();
        let three = format!("{two}[[zone]]\nname = \"c.\"\nfile = \"c.zone\"\n");
        let cfg = parse(&three, &cfg_path, &Overrides::default()).unwrap();
        let (second, report) = build(&cfg, Some(&first));
        assert_eq!(report.loaded, 2);
        assert_eq!(report.kept_old, vec!["b.".to_string()]);
        assert!(
            report.errors.iter().all(|e| e.file == dir.join("b.zone")),
            "{:?}",
            report.errors
        );
        let serials: Vec<u32> = second.zone_infos().iter().map(|z| z.serial).collect();
        assert_eq!(serials, [10, 2, 3]);

        // a is removed from the configuration: no longer served.
        let only_c = "[[zone]]\nname = \"c.\"\nfile = \"c.zone\"\n";
        let cfg = parse(only_c, &cfg_path, &Overrides::default()).unwrap();
        let (third, _) = build(&cfg, Some(&second));
        assert!(third.zones.find(b"\x01a\x00").is_none());
        assert_eq!(third.zones.zones.len(), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn restart_needed_lists_changes() {
        let p = std::path::Path::new("/tmp/x.toml");
        let a = parse("listen = [\"127.0.0.1:53\"]\n", p, &Overrides::default()).unwrap();
        let b = parse(
            "listen = [\"127.0.0.1:54\"]\nedns_payload = 1400\n",
            p,
            &Overrides::default(),
        )
        .unwrap();
        assert_eq!(restart_needed(&a, &b), vec!["listen"]);
        assert!(restart_needed(&a, &a).is_empty());
        // with XDP on, the EDNS payload is the kernel's too: fixed until a restart
        let xdp = "[xdp]\ninterfaces = [\"eth0\"]\n";
        let a = parse(&format!("edns_payload = 1232\n{xdp}"), p, &Overrides::default()).unwrap();
        let b = parse(&format!("edns_payload = 1400\n{xdp}"), p, &Overrides::default()).unwrap();
        assert_eq!(restart_needed(&a, &b), vec!["edns_payload"]);
    }

    /// `[resolver]`: tunables and `allow` apply on reload; sizes, priming, forwarding and
    /// the hints file are named as needing a restart.
    #[test]
    fn resolver_settings_split_live_and_restart() {
        // A directory of its own: the tests run in parallel and this one removes it.
        let dir = std::env::temp_dir().join(format!("xdns-reload-resolver-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for hints in ["root.hints", "other.hints"] {
            std::fs::write(dir.join(hints), ". 3600000 NS a.root.\na.root. 3600000 A 198.18.0.1\n").unwrap();
        }
        let p = dir.join("x.toml");
        let conf = |extra: &str| {
            let text = format!("listen = [\"127.0.0.1:53\"]\n[resolver]\nroot_hints = \"root.hints\"\n{extra}");
            parse(&text, &p, &Overrides::default()).unwrap()
        };
        let a = conf("");
        let live = conf("allow = [\"198.18.0.0/15\"]\nfanout = 3\nupstream_timeout_ms = 900\nprefetch_percent = 20\n");
        assert!(restart_needed(&a, &live).is_empty(), "{:?}", restart_needed(&a, &live));
        let fixed = conf("cache_entries = 100\nipv6 = false\n");
        assert_eq!(restart_needed(&a, &fixed), vec!["resolver.cache_entries", "resolver.ipv4/ipv6"]);
        let hints = parse(
            "listen = [\"127.0.0.1:53\"]\n[resolver]\nroot_hints = \"other.hints\"\n",
            &p,
            &Overrides::default(),
        )
        .unwrap();
        assert_eq!(restart_needed(&a, &hints), vec!["resolver.root_hints"]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
