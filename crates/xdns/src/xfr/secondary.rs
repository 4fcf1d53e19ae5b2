//! Secondary zones: one task per zone keeps it current from its primaries.
//!
//! The task checks the primary at start (the tasks start with the daemon, beside the XDP
//! program's load; a version they bring is swapped in once start-up is done: the server
//! holds the swap lock until then; with nothing to serve at start the program is loaded by
//! the first version swapped in instead: `server::start::defers_fastpath`), then every SOA
//! refresh interval (retry interval
//! after a failure), and at once on an accepted NOTIFY or `xdns zone refresh`. A check is an
//! IXFR from our serial over TCP (AXFR when we have nothing, on `xdns zone retransfer`, and
//! as the fallback when the primary cannot answer IXFR or its differences do not apply to
//! our copy). An IXFR is applied in place to a spare copy of the zone and validated where it
//! touched ([`super::incremental`]); what that cannot decide builds the zone whole from its
//! records, and an AXFR builds it as the records arrive ([`client::fetch`],
//! `xdns_zone::records`); either is validated as the loader does a zone file. The new version
//! is then swapped in as a reload does: the served set in userspace, then the XDP maps (an
//! IXFR's owners only, in place, when the kernel can). The copy served is written to the
//! zone's `file` afterwards (in the background after an IXFR applied in place). Anything that fails keeps the old version serving and is
//! logged. After `expire` seconds without a successful check the zone answers SERVFAIL
//! until a primary answers again.
//!
//! The expire clock counts from the last contact with a primary (a check that transferred a
//! version or found ours up to date), also across restarts: that time is the stored copy's
//! modification time, set to it on every successful check (as BIND does). A stored copy
//! read at start is counted from its modification time: one older than `expire` is not
//! served (SERVFAIL, out of the kernel maps) until a primary answers. An operator who puts
//! a copy in place by hand gives it a fresh clock (its mtime is now; `touch -d` sets another).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use domain::base::iana::Rcode;
use domain::tsig::Key;
use tokio::sync::{watch, Notify};
use xdns_zone::load::text_to_key;
use xdns_zone::records::RecordBuilder;
use xdns_zone::{NameKey, Zone, ZoneSource};

use super::client::{self, Fetched, Kind, XfrError};
use super::incremental;
use super::journal::{self, RecordSet};
use super::serial::{self, Timers};
use crate::config::{Config, SecondaryConfig};
use crate::reload::LoadedZone;
use crate::server::Shared;
use crate::stats::TransferInfo;

/// Retry interval while no SOA is known (nothing transferred, no stored copy).
pub const RETRY_UNKNOWN: Duration = Duration::from_secs(10);

/// After an IXFR applied in place, the stored copy is written this much later (changes in a
/// burst are written once).
const STORE_DELAY: Duration = Duration::from_secs(1);

/// How long a change in place waits for the stored copy's writer to let go of its spare
/// before copying the zone whole.
const SPARE_WAIT: Duration = Duration::from_millis(500);

/// Every secondary zone: those of the configuration (fixed until a restart), and the
/// members of catalog zones, which come and go with their catalog's versions.
#[derive(Debug, Default)]
pub struct Registry {
    zones: std::sync::RwLock<Vec<Arc<Secondary>>>,
    /// What the tasks started later (catalog members) need: the server and its stop switch.
    runtime: std::sync::OnceLock<(std::sync::Weak<Shared>, watch::Receiver<bool>)>,
}

impl Registry {
    /// The secondaries and catalogs of `cfg`.
    pub fn new(cfg: &Config) -> Self {
        let plain = cfg.secondaries.iter().map(|s| (s, Role::Zone));
        let catalogs = cfg.catalogs.iter().map(|s| (s, Role::Catalog));
        let zones = plain.chain(catalogs).filter_map(|(s, role)| Secondary::new(s.clone(), role)).collect();
        Self { zones: std::sync::RwLock::new(zones), runtime: std::sync::OnceLock::new() }
    }

    /// Every secondary zone now.
    pub fn list(&self) -> Vec<Arc<Secondary>> {
        self.zones.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The secondary zone whose apex is `apex` (lowercased wire form).
    pub fn find(&self, apex: &[u8]) -> Option<Arc<Secondary>> {
        self.zones.read().unwrap_or_else(|e| e.into_inner()).iter().find(|s| &s.apex[..] == apex).cloned()
    }

    /// The secondary zone named `name` (presentation form, any case, final dot optional).
    pub fn by_name(&self, name: &str) -> Option<Arc<Secondary>> {
        text_to_key(name).and_then(|k| self.find(&k))
    }

    /// Add a catalog member (unless a zone of that name exists) and start its task.
    pub(super) fn add(&self, sec: Arc<Secondary>) -> bool {
        let mut z = self.zones.write().unwrap_or_else(|e| e.into_inner());
        if z.iter().any(|s| s.apex == sec.apex) {
            return false;
        }
        z.push(sec.clone());
        drop(z);
        if let Some((shared, stop)) = self.runtime.get() {
            if let Some(shared) = shared.upgrade() {
                tokio::spawn(run(shared, sec, stop.clone()));
            }
        }
        true
    }

    /// Remove a catalog member: its task ends.
    pub(super) fn remove(&self, apex: &[u8]) -> Option<Arc<Secondary>> {
        let mut z = self.zones.write().unwrap_or_else(|e| e.into_inner());
        let i = z.iter().position(|s| &s.apex[..] == apex)?;
        let sec = z.remove(i);
        sec.removed.store(true, Ordering::Relaxed);
        sec.wake.notify_one();
        Some(sec)
    }
}

/// What a secondary zone is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Role {
    /// A `[[zone]]` with `primaries`.
    Zone,
    /// A `[[catalog]]` (RFC 9432): its members become secondary zones.
    Catalog,
    /// A member of the named catalog.
    Member(String),
}

/// One secondary zone.
pub struct Secondary {
    pub cfg: SecondaryConfig,
    pub role: Role,
    /// A catalog member no longer in its catalog: its task ends.
    removed: AtomicBool,
    pub apex: NameKey,
    pub key: Option<Arc<Key>>,
    /// Woken by an accepted NOTIFY or a control command: check the primary now.
    wake: Notify,
    /// The next check is an AXFR (`xdns zone retransfer`).
    force_axfr: AtomicBool,
    /// What `xdns stats` shows.
    status: Mutex<TransferInfo>,
    /// The spare copy for IXFRs applied in place ([`incremental`]).
    inc: Arc<Mutex<incremental::State>>,
    /// When the last NOTIFY (or command) woke the task, for the transfer's log line.
    woken: Mutex<Option<Instant>>,
    /// The stored copy is being written; another version is to be written after it.
    storing: Mutex<(bool, bool)>,
    /// Held while the stored copy is written.
    store_lock: tokio::sync::Mutex<()>,
    /// Set by a change in place whose spare the writer holds: the write stops.
    store_cancel: Arc<AtomicBool>,
    /// The last successful check of a primary (the stored copy's modification time).
    contact: Mutex<Option<SystemTime>>,
}

impl std::fmt::Debug for Secondary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Secondary").field("cfg", &self.cfg).finish()
    }
}

fn unix(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

fn unix_in(d: Duration) -> u64 {
    unix(SystemTime::now() + d)
}

/// The last contact with a primary of the stored copy at `file`: its modification time.
fn contact_of(file: &Path) -> Option<SystemTime> {
    std::fs::metadata(file).ok()?.modified().ok()
}

/// Set the stored copy's modification time to `t`, the last contact with a primary.
fn touch(file: &Path, t: SystemTime) -> std::io::Result<()> {
    std::fs::File::open(file)?.set_modified(t)
}

/// How long the stored copy `zone`, read from `file`, has left before it expires: its SOA
/// expire counted from the file's modification time (the last contact with a primary; a
/// time in the future counts as now). `None` when either is unknown.
pub fn stored_expire_left(zone: &Zone, file: &Path) -> Option<Duration> {
    let t = Timers::from_soa(&soa_rdata(zone)?)?;
    let age = SystemTime::now().duration_since(contact_of(file)?).unwrap_or(Duration::ZERO);
    Some(t.expire.saturating_sub(age))
}

impl Secondary {
    /// A secondary zone of `cfg` (`None` if its name is not a domain name).
    pub fn new(cfg: SecondaryConfig, role: Role) -> Option<Arc<Self>> {
        let apex = text_to_key(&cfg.name)?;
        let key = cfg.key.as_ref().and_then(|k| k.key().ok());
        let status = TransferInfo {
            primaries: cfg.primaries.iter().map(|p| p.to_string()).collect(),
            source: "none".into(),
            ..Default::default()
        };
        Some(Arc::new(Secondary {
            cfg,
            role,
            removed: AtomicBool::new(false),
            apex,
            key,
            wake: Notify::new(),
            force_axfr: AtomicBool::new(false),
            status: Mutex::new(status),
            inc: Arc::default(),
            woken: Mutex::new(None),
            storing: Mutex::new((false, false)),
            store_lock: tokio::sync::Mutex::new(()),
            store_cancel: Arc::default(),
            contact: Mutex::new(None),
        }))
    }

    /// Check the primary now (NOTIFY, `xdns zone refresh`).
    pub fn wake(&self) {
        self.woken.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert_with(Instant::now);
        self.wake.notify_one();
    }

    /// How the last IXFR was applied in userspace (`in place: …` or `full: REASON`).
    fn note_apply(&self, how: String, in_place: bool) {
        let mut st = self.status();
        if in_place {
            st.apply_in_place += 1;
        } else {
            st.apply_full += 1;
        }
        st.last_apply = Some(how);
    }

    /// Transfer the whole zone now (`xdns zone retransfer`).
    pub fn retransfer(&self) {
        self.force_axfr.store(true, Ordering::Relaxed);
        self.wake.notify_one();
    }

    /// A NOTIFY was refused.
    pub fn count_refused_notify(&self) {
        self.status().notifies_refused += 1;
    }

    fn status(&self) -> std::sync::MutexGuard<'_, TransferInfo> {
        self.status.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What `xdns stats` shows of this zone.
    pub fn info(&self) -> TransferInfo {
        self.status().clone()
    }
}

/// Start one task per secondary zone of the served registry.
pub fn spawn(shared: &Arc<Shared>, stop: watch::Receiver<bool>) -> Vec<tokio::task::JoinHandle<()>> {
    let Some(reg) = shared.served.load().xfr.clone() else {
        return Vec::new();
    };
    let _ = reg.runtime.set((Arc::downgrade(shared), stop.clone()));
    reg.list()
        .into_iter()
        .map(|s| tokio::spawn(run(shared.clone(), s, stop.clone())))
        .collect()
}

/// The version of the zone served now (also when expired), if any.
fn current(shared: &Shared, name: &str) -> Option<Arc<Zone>> {
    shared.served.load().loaded.iter().find(|l| l.source.name == name).map(|l| l.zone.clone())
}

/// The apex SOA RDATA of a zone.
fn soa_rdata(zone: &Zone) -> Option<Bytes> {
    zone.nodes.get(&zone.apex)?.rrset(client::SOA)?.rdata.first().map(Bytes::copy_from_slice)
}

async fn run(shared: Arc<Shared>, sec: Arc<Secondary>, mut stop: watch::Receiver<bool>) {
    let name = sec.cfg.name.clone();
    let mut start = current(&shared, &name);
    if start.is_none() && matches!(sec.role, Role::Member(_)) {
        // a catalog member is not in the configuration: its stored copy is read here
        start = load_member_copy(&shared, &sec).await;
    }
    let mut timers = start.as_deref().and_then(soa_rdata).and_then(|s| Timers::from_soa(&s));
    // A stored copy read at start: its expire counts from its last contact with a primary
    // (the file's modification time); one already past it was marked expired when loaded.
    let left = start.as_deref().and_then(|z| stored_expire_left(z, &z.file));
    let mut expired = shared.served.load().expired.contains(&sec.apex);
    let mut expire_at = if expired { None } else { timers.map(|t| Instant::now() + left.unwrap_or(t.expire)) };
    {
        let mut st = sec.status();
        if let (Some(z), Some(t)) = (&start, &timers) {
            st.source = format!("file {}", z.file.display());
            st.serial = Some(z.serial);
            st.expires = Some(unix_in(left.unwrap_or(t.expire)));
            st.expired = expired;
            st.last_refresh = contact_of(&z.file).map(unix);
        }
    }
    if expired {
        tracing::error!(zone = %name, "the stored copy is older than the SOA expire time (counted from its last contact with a primary, the file's mtime): answering SERVFAIL until a primary answers");
    }
    if let Some(z) = &start {
        prepare_later(&shared, &sec, z.clone());
    }
    if let (Role::Catalog, Some(z)) = (&sec.role, &start) {
        super::catalog::sync(&shared, &sec, z).await;
    }
    // held no longer: the version served at start is the spare of the first IXFR after the
    // next one
    drop(start);
    let mut next = Instant::now();
    loop {
        let wake = expire_at.map_or(next, |e| e.min(next));
        tokio::select! {
            _ = crate::server::stopped(&mut stop) => return,
            _ = tokio::time::sleep_until(wake.into()) => {}
            _ = sec.wake.notified() => next = Instant::now(),
        }
        if sec.removed.load(Ordering::Relaxed) {
            tracing::info!(zone = %name, "no longer in its catalog: not served");
            uninstall(&shared, &name).await;
            // its stored copy goes too (a member added again starts from a transfer)
            let (path, keep) = target(&sec);
            if keep {
                let _one = sec.store_lock.lock().await;
                if let Err(e) = std::fs::remove_file(&path) {
                    if e.kind() != std::io::ErrorKind::NotFound {
                        tracing::warn!(zone = %name, file = %path.display(), error = %e, "the removed member's stored copy could not be deleted");
                    }
                }
            }
            return;
        }
        let now = Instant::now();
        if !expired && expire_at.is_some_and(|e| now >= e) {
            tracing::error!(zone = %name, "zone expired: no primary answered for the SOA expire time; answering SERVFAIL");
            set_expired(&shared, &sec, true).await;
            expired = true;
            expire_at = None;
        }
        if now < next {
            continue;
        }
        match refresh(&shared, &sec, expired).await {
            Ok(t) => {
                noted_contact(&sec, SystemTime::now());
                timers = Some(t);
                expired = false;
                next = Instant::now() + t.refresh;
                expire_at = Some(Instant::now() + t.expire);
                let mut st = sec.status();
                st.expired = false;
                st.last_refresh = Some(unix(SystemTime::now()));
                st.expires = Some(unix_in(t.expire));
                st.last_error = None;
            }
            Err(e) => {
                sec.woken.lock().unwrap_or_else(|e| e.into_inner()).take();
                let retry = timers.map_or(RETRY_UNKNOWN, |t| t.retry);
                tracing::warn!(zone = %name, error = %e, retry_s = retry.as_secs(), "refresh failed; the zone keeps serving what it has");
                next = Instant::now() + retry;
                let mut st = sec.status();
                st.failures += 1;
                st.last_error = Some(e);
            }
        }
        sec.status().next_refresh = Some(unix(SystemTime::now() + next.saturating_duration_since(Instant::now())));
    }
}

/// A catalog member's stored copy (its `file`, [`super::catalog::member_file`]), read and
/// served (expired if older than its expire since the last contact), if there is a good one.
async fn load_member_copy(shared: &Arc<Shared>, sec: &Arc<Secondary>) -> Option<Arc<Zone>> {
    let file = sec.cfg.file.clone().filter(|f| f.is_file())?;
    let src = ZoneSource { name: sec.cfg.name.clone(), file: file.clone() };
    let loaded = tokio::task::spawn_blocking(move || crate::reload::load_guarded(&src)).await.ok()?;
    let zone = match loaded {
        Ok(z) => Arc::new(z),
        Err(errs) => {
            for e in &errs {
                tracing::error!(zone = %sec.cfg.name, "stored copy not served until a transfer brings a good one: {e}");
            }
            return None;
        }
    };
    let expired = stored_expire_left(&zone, &file) == Some(Duration::ZERO);
    tracing::info!(zone = %sec.cfg.name, file = %file.display(), serial = zone.serial, expired, "catalog member: stored copy read");
    install(shared, &sec.cfg.name, zone.clone(), expired).await;
    Some(zone)
}

/// A successful check of a primary at `t`: the expire clock starts again, also for the
/// next start (the stored copy's modification time; a copy being written gets it when
/// renamed into place).
fn noted_contact(sec: &Secondary, t: SystemTime) {
    *sec.contact.lock().unwrap_or_else(|e| e.into_inner()) = Some(t);
    let (path, keep) = target(sec);
    if keep && path.is_file() {
        if let Err(e) = touch(&path, t) {
            tracing::warn!(zone = %sec.cfg.name, file = %path.display(), error = %e, "could not set the stored copy's modification time (the last contact, for expire after a restart)");
        }
    }
}

/// One check of the primaries, in order: the timers of the version served afterwards.
async fn refresh(shared: &Arc<Shared>, sec: &Arc<Secondary>, expired: bool) -> Result<Timers, String> {
    let force = sec.force_axfr.swap(false, Ordering::Relaxed);
    let cur = current(shared, &sec.cfg.name);
    let have = cur.as_deref().and_then(|z| soa_rdata(z).map(|s| (z.serial, s)));
    let mut errors = Vec::new();
    for &primary in &sec.cfg.primaries {
        match transfer_from(shared, sec, primary, cur.clone(), have.clone(), force, expired).await {
            Ok(t) => return Ok(t),
            Err(e) => {
                tracing::warn!(zone = %sec.cfg.name, %primary, error = %e, "transfer failed");
                errors.push(format!("{primary}: {e}"));
            }
        }
    }
    Err(errors.join("; "))
}

async fn transfer_from(
    shared: &Arc<Shared>,
    sec: &Arc<Secondary>,
    primary: SocketAddr,
    cur: Option<Arc<Zone>>,
    have: Option<(u32, Bytes)>,
    force: bool,
    expired: bool,
) -> Result<Timers, String> {
    let name = &sec.cfg.name;
    let key = sec.key.as_ref();
    let t0 = Instant::now();
    let mut kind = if have.is_some() && !force { Kind::Ixfr } else { Kind::Axfr };
    // a whole zone's table is made as large as the version served at once
    let hint = cur.as_ref().map_or(0, |z| z.nodes.len());
    let mut got = client::fetch(primary, name, key, kind, have.clone(), hint).await;
    if kind == Kind::Ixfr {
        if let Err(XfrError::Rcode(rc)) = &got {
            if *rc != Rcode::REFUSED && *rc != Rcode::NOTAUTH {
                tracing::info!(zone = %name, %primary, rcode = %rc, "IXFR not answered: AXFR");
                kind = Kind::Axfr;
                got = client::fetch(primary, name, key, kind, have.clone(), hint).await;
            }
        }
    }
    let got = got.map_err(|e| e.to_string())?;
    let have_serial = have.as_ref().map(|h| h.0);
    let fetched_ms = t0.elapsed().as_millis() as u64;
    // the owners an IXFR changed: the kernel may then update only their entries
    let mut changed: Option<Vec<Vec<u8>>> = None;
    // the IXFR's differences, when applied in place (the journal keeps them as they are)
    let mut known: Option<Vec<client::Diff>> = None;
    let mut in_place: Option<incremental::Applied> = None;
    let mut how = "axfr";
    // the whole path: a record set built and validated as a zone file is
    let mut set: Option<RecordSet> = None;
    // an AXFR: the zone built as it arrived, validated below
    let mut built: Option<Box<RecordBuilder>> = None;
    match got {
        Fetched::UpToDate { serial } => {
            tracing::debug!(zone = %name, %primary, serial, "up to date");
            return up_to_date(shared, sec, cur, expired, primary).await;
        }
        Fetched::Full { serial, zone } => {
            if let Some(h) = have_serial {
                if !force && !serial::gt(serial, h) {
                    if serial != h {
                        tracing::warn!(zone = %name, %primary, serial, ours = h, "the primary's serial is older than ours: kept ours");
                    }
                    return up_to_date(shared, sec, cur, expired, primary).await;
                }
            }
            built = Some(zone);
        }
        Fetched::Incremental { serial, diffs } => {
            let Some(base) = cur.clone() else {
                return Err("IXFR differences without a zone to apply them to".into());
            };
            let n = diffs.len();
            let mut owners: Vec<Vec<u8>> =
                diffs.iter().flat_map(|d| d.deleted.iter().chain(&d.added)).map(|r| r.owner.to_ascii_lowercase()).collect();
            owners.sort_unstable();
            owners.dedup();
            changed = Some(owners);
            how = "ixfr";
            let inc = sec.inc.clone();
            let cancel = sec.store_cancel.clone();
            let (applied, diffs) = tokio::task::spawn_blocking(move || {
                // the stored copy's writer may hold the spare (the version it writes): it
                // stops, and writes a later version later
                let t = Instant::now();
                while inc.lock().unwrap_or_else(|e| e.into_inner()).spare_in_use() && t.elapsed() < SPARE_WAIT {
                    cancel.store(true, Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(1));
                }
                let r = inc.lock().unwrap_or_else(|e| e.into_inner()).apply(&base, &diffs);
                (r, diffs)
            })
            .await
            .map_err(|e| {
                // a panic mid-way leaves the copy in no known state: start over
                *sec.inc.lock().unwrap_or_else(|e| e.into_inner()) = incremental::State::default();
                e.to_string()
            })?;
            let whole = match applied {
                Ok(a) => {
                    for w in a.warnings.iter().take(100) {
                        tracing::warn!(zone = %name, "{w}");
                    }
                    tracing::debug!(zone = %name, serial, differences = n, touched = a.touched.len(), "IXFR applied in place");
                    in_place = Some(a);
                    known = Some(diffs);
                    None
                }
                Err(incremental::ApplyError::Invalid(errs)) => {
                    for e in &errs {
                        tracing::error!(zone = %name, "IXFR refused: {e}");
                    }
                    sec.status().apply_refused += 1;
                    return Err(format!("IXFR refused, the old version keeps serving: {}", incremental::ApplyError::Invalid(errs)));
                }
                Err(incremental::ApplyError::Mismatch(e)) => Some(Err(e)),
                Err(incremental::ApplyError::Fallback(reason)) => Some(Ok((reason, diffs))),
            };
            match whole {
                None => {}
                Some(Ok((reason, diffs))) => {
                    // the whole path: the differences applied to a copy of every record
                    tracing::info!(zone = %name, %reason, "IXFR not applied in place: the zone is built whole");
                    sec.note_apply(format!("full: {reason}"), false);
                    let base = cur.clone().ok_or("no zone")?;
                    let applied = tokio::task::spawn_blocking(move || {
                        let mut set = journal::records_of(&base);
                        journal::apply(&mut set, &diffs).map(|()| set)
                    })
                    .await
                    .map_err(|e| e.to_string())?;
                    match applied {
                        Ok(s) => set = Some(s),
                        Err(e) => return Err(e),
                    }
                }
                Some(Err(e)) => {
                    changed = None;
                    how = "axfr";
                    tracing::warn!(zone = %name, %primary, error = %e, "IXFR does not apply to our copy: AXFR");
                    sec.note_apply(format!("axfr: {e}"), false);
                    match client::fetch(primary, name, key, Kind::Axfr, None, hint).await.map_err(|e| e.to_string())? {
                        Fetched::Full { zone, .. } => built = Some(zone),
                        other => return Err(format!("AXFR answered {other:?}")),
                    }
                }
            }
        }
    };
    let applied_ms = t0.elapsed().as_millis() as u64;
    let (zone, touched) = match (in_place, set) {
        (None, None) if built.is_some() => (materialize_built(sec, built.take().ok_or("no zone")?).await?, None),
        (Some(a), _) => {
            let note = match (&a.copied, &a.validation) {
                (None, None) => format!("in place: {} names", a.touched.len()),
                (c, v) => format!(
                    "in place: {} names{}{}",
                    a.touched.len(),
                    c.as_ref().map_or(String::new(), |c| format!("; copied whole: {c}")),
                    v.as_ref().map_or(String::new(), |v| format!("; validated whole: {v}"))
                ),
            };
            sec.note_apply(note, true);
            (a.zone, Some(a.touched))
        }
        (None, Some(set)) => (materialize(sec, set).await?, None),
        (None, None) => return Err("nothing to apply".into()),
    };
    let built_ms = t0.elapsed().as_millis() as u64;
    let touched_any = touched.is_some();
    let Some(timers) = soa_rdata(&zone).and_then(|s| Timers::from_soa(&s)) else {
        // an applied copy that is not swapped in leaves the spare state behind it
        *sec.inc.lock().unwrap_or_else(|e| e.into_inner()) = incremental::State::default();
        return Err("no SOA after the transfer".into());
    };
    let serial = zone.serial;
    let zone = Arc::new(zone);
    let change = changed.map(|changed| crate::xdp::ZoneChange { apex: zone.apex.to_vec(), changed });
    // what `xdns stats` says of the version served changes when userspace serves it, not
    // after the kernel's update (seconds when its maps grow)
    let served = || {
        let mut st = sec.status();
        st.serial = Some(serial);
        st.source = format!("{how} from {primary}");
        st.last_transfer = Some(how.to_string());
        st.last_transfer_at = Some(unix(SystemTime::now()));
    };
    // a good version: the contact the stored copy written below carries as its mtime
    *sec.contact.lock().unwrap_or_else(|e| e.into_inner()) = Some(SystemTime::now());
    let kernel = install_change(shared, &sec.cfg.name, zone.clone(), false, change, known.as_deref(), served).await;
    let ms = t0.elapsed().as_millis() as u64;
    let since_wake_ms = sec.woken.lock().unwrap_or_else(|e| e.into_inner()).take().map(|w| w.elapsed().as_millis() as u64);
    // the old version becomes the spare of the next change in place; after a whole build,
    // a spare is copied in the background
    {
        let inc = sec.inc.clone();
        match (touched, cur) {
            (Some(t), Some(old)) => inc.lock().unwrap_or_else(|e| e.into_inner()).installed(old, &zone, t),
            (_, cur) => {
                drop(cur);
                prepare_later(shared, sec, zone.clone());
            }
        }
    }
    if sec.role == Role::Catalog {
        super::catalog::sync(shared, sec, &zone).await;
    }
    // where the time went: the transfer, applying it (in place, or to a copy of the
    // records), building and validating the new version (whole path only), swapping it in
    // (userspace and the kernel); since_wake_ms counts from the NOTIFY (or command)
    tracing::info!(zone = %name, %primary, serial, kind = how, ms, fetched_ms, applied_ms, built_ms,
        since_wake_ms = since_wake_ms.map_or(-1, |v| v as i64),
        kernel = %kernel.as_ref().map_or("-".to_string(), |k| k.to_string()), "transferred and serving");
    {
        let mut st = sec.status();
        st.last_transfer_ms = Some(ms);
        st.transfers += 1;
        match &kernel {
            Some(crate::xdp::KernelUpdate::InPlace { .. }) => st.kernel_in_place += 1,
            Some(crate::xdp::KernelUpdate::Full { .. }) => st.kernel_full += 1,
            None => {}
        }
        st.last_kernel_update = kernel.as_ref().map(|k| k.to_string());
    }
    if touched_any {
        drop(zone);
        store_later(shared, sec);
    } else {
        // a whole transfer: written before the next check, as it always was (its build
        // took longer than the write)
        store(sec, zone).await;
    }
    Ok(timers)
}

/// Copy `zone` as the spare of the next change in place, in the background (unless another
/// version is served by then).
fn prepare_later(shared: &Arc<Shared>, sec: &Arc<Secondary>, zone: Arc<Zone>) {
    let inc = sec.inc.clone();
    let name = sec.cfg.name.clone();
    let shared = Arc::downgrade(shared);
    tokio::task::spawn_blocking(move || {
        let t = Instant::now();
        let mut st = inc.lock().unwrap_or_else(|e| e.into_inner());
        let Some(shared) = shared.upgrade() else { return };
        if !current(&shared, &name).is_some_and(|c| Arc::ptr_eq(&c, &zone)) {
            return;
        }
        drop(shared);
        st.prepare(&zone);
        tracing::info!(zone = %name, ms = t.elapsed().as_millis() as u64, "spare copy for changes in place made");
    });
}

/// The primary has nothing newer: keep serving (again, when the zone had expired).
async fn up_to_date(
    shared: &Arc<Shared>,
    sec: &Arc<Secondary>,
    cur: Option<Arc<Zone>>,
    expired: bool,
    primary: SocketAddr,
) -> Result<Timers, String> {
    sec.woken.lock().unwrap_or_else(|e| e.into_inner()).take();
    let cur = cur.ok_or("the primary says up to date, but we have no copy")?;
    let t = soa_rdata(&cur).and_then(|s| Timers::from_soa(&s)).ok_or("no SOA in our copy")?;
    if expired {
        tracing::info!(zone = %sec.cfg.name, %primary, "primary reached again: the zone is served again");
        // the contact first (the stored copy's mtime), then served: never served again while
        // the copy still carries the contact that expired it (a restart in between would
        // find it expired again)
        noted_contact(sec, SystemTime::now());
        set_expired(shared, sec, false).await;
    }
    Ok(t)
}

/// Where a zone's new version is written: its `file`, or a file in the temporary directory
/// (removed once loaded) when it has none.
fn target(sec: &Secondary) -> (PathBuf, bool) {
    match &sec.cfg.file {
        Some(f) => (f.clone(), true),
        None => {
            let safe: String = sec.cfg.name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '.' || c == '-' { c } else { '_' }).collect();
            (std::env::temp_dir().join(format!("xdns-{}-{safe}zone", std::process::id())), false)
        }
    }
}

/// Build the zone of `set` and validate it as the loader validates a zone file
/// ([`journal::build_zone`]). A zone that does not validate is written to `FILE.new` for
/// inspection. The good copy is written by [`store`] once it serves.
async fn materialize(sec: &Arc<Secondary>, set: RecordSet) -> Result<Zone, String> {
    let (path, _) = target(sec);
    let name = sec.cfg.name.clone();
    let apex = sec.apex.clone();
    tokio::task::spawn_blocking(move || match journal::build_zone(&apex, &path, &set) {
        Ok(zone) => Ok(zone),
        Err(errs) => {
            for e in &errs {
                tracing::error!(zone = %name, "transferred zone rejected: {e}");
            }
            let mut new = path.clone().into_os_string();
            new.push(".new");
            let new = PathBuf::from(new);
            if let Some(dir) = new.parent() {
                let _ = std::fs::create_dir_all(dir);
            }
            let kept = match journal::write(&new, &apex, &set) {
                Ok(()) => format!("; kept in {}", new.display()),
                Err(_) => String::new(),
            };
            let first = errs.first().map(|e| e.to_string()).unwrap_or_default();
            Err(format!("the transferred zone did not validate ({} errors, first: {first}){kept}", errs.len()))
        }
    })
    .await
    .map_err(|e| e.to_string())?
}

/// Validate the zone an AXFR built as it arrived ([`RecordBuilder`]), as the loader
/// validates a zone file. A zone that does not validate is written to `FILE.new` for
/// inspection. The good copy is written by [`store`] once it serves.
async fn materialize_built(sec: &Arc<Secondary>, zone: Box<RecordBuilder>) -> Result<Zone, String> {
    let (path, _) = target(sec);
    let name = sec.cfg.name.clone();
    tokio::task::spawn_blocking(move || {
        let built = zone.build(path.clone());
        for w in built.warnings.iter().take(100) {
            tracing::warn!(zone = %name, "{w}");
        }
        if built.errors.is_empty() {
            return Ok(built.zone);
        }
        for e in &built.errors {
            tracing::error!(zone = %name, "transferred zone rejected: {e}");
        }
        let mut new = path.into_os_string();
        new.push(".new");
        let new = PathBuf::from(new);
        if let Some(dir) = new.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        let kept = match journal::write_zone(&new, &built.zone, &std::sync::atomic::AtomicBool::new(false)) {
            Ok(_) => format!("; kept in {}", new.display()),
            Err(_) => String::new(),
        };
        let first = built.errors.first().map(|e| e.to_string()).unwrap_or_default();
        Err(format!("the transferred zone did not validate ({} errors, first: {first}){kept}", built.errors.len()))
    })
    .await
    .map_err(|e| e.to_string())?
}

/// Write the version served to the zone's `file` in the background, [`STORE_DELAY`] later,
/// so that writing a large zone never delays the next change; changes made meanwhile are
/// written together once the write in progress ends (the version served then). The writer
/// holds the version it writes, which a change two versions later needs as its spare: that
/// change stops the write ([`Secondary::store_cancel`]), which starts again after it.
fn store_later(shared: &Arc<Shared>, sec: &Arc<Secondary>) {
    {
        let mut w = sec.storing.lock().unwrap_or_else(|e| e.into_inner());
        if w.0 {
            w.1 = true;
            return;
        }
        *w = (true, false);
    }
    let (shared, sec) = (Arc::downgrade(shared), sec.clone());
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(STORE_DELAY).await;
            if let Some(z) = shared.upgrade().and_then(|s| current(&s, &sec.cfg.name)) {
                if !store(&sec, z).await {
                    // stopped for a change in place: written again after it
                    sec.storing.lock().unwrap_or_else(|e| e.into_inner()).1 = true;
                }
            }
            let mut w = sec.storing.lock().unwrap_or_else(|e| e.into_inner());
            if !w.1 {
                *w = (false, false);
                return;
            }
            w.1 = false;
        }
    });
}

/// Write `zone` to the zone's `file` (`FILE.tmp`, then renamed over it): the copy served at
/// the next start. Nothing without `file`. One write at a time. False when a change in
/// place stopped it (the file is left as it was).
async fn store(sec: &Arc<Secondary>, zone: Arc<Zone>) -> bool {
    let (path, keep) = target(sec);
    if !keep {
        return true;
    }
    let _one = sec.store_lock.lock().await;
    let name = sec.cfg.name.clone();
    let cancel = sec.store_cancel.clone();
    cancel.store(false, Ordering::Relaxed);
    let contact = *sec.contact.lock().unwrap_or_else(|e| e.into_inner());
    let r = tokio::task::spawn_blocking(move || {
        let mut new = path.clone().into_os_string();
        new.push(".tmp");
        let new = PathBuf::from(new);
        if let Some(dir) = new.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let done = journal::write_zone(&new, &zone, &cancel)?;
        drop(zone);
        if !done {
            let _ = std::fs::remove_file(&new);
            return Ok(false);
        }
        // the copy's mtime is its last contact with a primary (expire after a restart)
        if let Some(t) = contact {
            touch(&new, t)?;
        }
        std::fs::rename(&new, &path).map(|()| true)
    })
    .await;
    match r {
        Ok(Ok(done)) => return done,
        Ok(Err(e)) => tracing::error!(zone = %name, error = %e, "the transferred copy could not be stored; it is served all the same"),
        Err(e) => tracing::error!(zone = %name, error = %e, "storing the transferred copy failed"),
    }
    true
}

/// Swap `zone` in as the version of `name` served, atomically, as a reload does.
pub async fn install(shared: &Arc<Shared>, name: &str, zone: Arc<Zone>, expired: bool) {
    install_change(shared, name, zone, expired, None, None, || {}).await;
}

/// [`install`], telling the kernel which owners changed (an IXFR's) so that it may update
/// only their entries; `served` runs once userspace serves the new version, before the
/// kernel's update. Returns how the kernel took it (`None` without XDP).
async fn install_change(
    shared: &Arc<Shared>,
    name: &str,
    zone: Arc<Zone>,
    expired: bool,
    change: Option<crate::xdp::ZoneChange>,
    known: Option<&[client::Diff]>,
    served: impl FnOnce(),
) -> Option<crate::xdp::KernelUpdate> {
    let _g = shared.swap.lock().await;
    let cur = shared.served.load_full();
    let mut loaded: Vec<LoadedZone> = cur.loaded.clone();
    let source = ZoneSource { name: name.to_string(), file: zone.file.clone() };
    let keep = cur.outgoing.get(&zone.apex).is_some_and(|o| o.active());
    match loaded.iter_mut().find(|l| l.source.name == name) {
        Some(l) => {
            let journal = super::primary::next_journal_with(Some(l), &zone, keep, known);
            *l = LoadedZone { source, zone: zone.clone(), journal }
        }
        None => loaded.push(LoadedZone { source, zone: zone.clone(), journal: Arc::default() }),
    }
    let mut exp = cur.expired.clone();
    exp.retain(|a| *a != zone.apex);
    if expired {
        exp.push(zone.apex.clone());
    }
    let new = Arc::new(cur.with(loaded, exp));
    shared.served.store(new.clone());
    served();
    let kernel = match change {
        Some(c) if !expired => crate::server::update_fastpath(shared, c).await,
        _ => {
            crate::server::refill_fastpath(shared).await;
            None
        }
    };
    super::primary::notify_changed(Some(&cur), &new);
    kernel
}

/// Stop serving the zone `name` (a catalog member removed), atomically.
async fn uninstall(shared: &Arc<Shared>, name: &str) {
    let _g = shared.swap.lock().await;
    let cur = shared.served.load_full();
    let loaded: Vec<LoadedZone> = cur.loaded.iter().filter(|l| l.source.name != name).cloned().collect();
    if loaded.len() == cur.loaded.len() {
        return;
    }
    shared.served.store(Arc::new(cur.with(loaded, cur.expired.clone())));
    crate::server::refill_fastpath(shared).await;
}

/// Mark the zone `name` expired (SERVFAIL, out of the kernel maps) or served again; the
/// status shows it as soon as userspace answers so, before the kernel's maps follow.
async fn set_expired(shared: &Arc<Shared>, sec: &Secondary, expired: bool) {
    if let Some(z) = current(shared, &sec.cfg.name) {
        install_change(shared, &sec.cfg.name, z, expired, None, None, || sec.status().expired = expired).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{parse, Overrides};
    use crate::reload::{build, Served};
    use crate::xfr::primary::{self, Decision, OutgoingConfig};
    use std::sync::atomic::AtomicU8;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use xdns_zone::load_zone;
    use xdns_zone::{Node, Rrset, Transport};

    fn zone_text(serial: u32, hosts: usize) -> String {
        let mut t = format!("$TTL 60\n@ SOA ns.t. h.t. {serial} 60 10 600 60\n@ NS ns\nns A 198.18.0.1\n");
        for i in 0..hosts {
            t.push_str(&format!("h{i} A 198.18.{}.{}\n", i / 250, i % 250));
        }
        t
    }

    /// What the fake primary does with the next request.
    const FULL: u8 = 0;
    const CUT: u8 = 1;

    /// An IXFR is answered with this rcode alone (NOTIMP, FORMERR, REFUSED); AXFR as FULL.
    const IXFR_RCODE: u8 = 2;

    /// A primary on 127.0.0.1 serving `served` through xdns's own transfer-out step: all
    /// messages, or (CUT) only the first one before closing.
    async fn fake_primary(served: Arc<arc_swap::ArcSwap<Served>>, mode: Arc<AtomicU8>) -> SocketAddr {
        fake_primary_logged(served, mode, Arc::new(AtomicU8::new(0)), Arc::default()).await
    }

    /// [`fake_primary`], also answering (IXFR_RCODE) an IXFR with the rcode `rcode` alone,
    /// and noting the QTYPE of every request in `seen`.
    async fn fake_primary_logged(
        served: Arc<arc_swap::ArcSwap<Served>>,
        mode: Arc<AtomicU8>,
        rcode: Arc<AtomicU8>,
        seen: Arc<Mutex<Vec<u16>>>,
    ) -> SocketAddr {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut c, peer)) = l.accept().await {
                let len = c.read_u16().await.unwrap() as usize;
                let mut q = vec![0; len];
                c.read_exact(&mut q).await.unwrap();
                // the question ends after QNAME (uncompressed in a request), QTYPE, QCLASS
                let mut end = 12;
                while q[end] != 0 {
                    end += 1 + q[end] as usize;
                }
                end += 5;
                let qtype = u16::from_be_bytes([q[end - 4], q[end - 3]]);
                seen.lock().unwrap().push(qtype);
                if qtype == 251 && mode.load(Ordering::Relaxed) == IXFR_RCODE {
                    // the header and question, QR set, the rcode; no other section
                    let mut r = q[..end].to_vec();
                    r[2] |= 0x80;
                    r[3] = (r[3] & 0xf0) | rcode.load(Ordering::Relaxed);
                    r[6..12].fill(0);
                    c.write_all(&(r.len() as u16).to_be_bytes()).await.unwrap();
                    c.write_all(&r).await.unwrap();
                    continue;
                }
                let mut out = Vec::new();
                let d = primary::outgoing(&served.load(), &q, Some(peer.ip()), Transport::Tcp, &mut out);
                let Some(Decision::Stream(mut t)) = d else { panic!("not a transfer") };
                let cut = mode.load(Ordering::Relaxed) == CUT;
                while let Some(m) = t.next() {
                    c.write_all(&(m.len() as u16).to_be_bytes()).await.unwrap();
                    c.write_all(&m).await.unwrap();
                    if cut {
                        break;
                    }
                }
            }
        });
        addr
    }

    fn primary_served(dir: &std::path::Path, text: &str, old: Option<&Served>) -> Served {
        std::fs::write(dir.join("p.zone"), text).unwrap();
        let z = Arc::new(load_zone(&ZoneSource { name: "t.".into(), file: dir.join("p.zone") }, None).unwrap());
        let prev = old.and_then(|o| o.loaded.first());
        let journal = primary::next_journal(prev, &z, true);
        let src = ZoneSource { name: "t.".into(), file: dir.join("p.zone") };
        let mut out = hashbrown::HashMap::new();
        let cfg = OutgoingConfig {
            name: "t.".into(),
            notify: vec![],
            allow_transfer: vec![crate::recursion::Prefix::parse("127.0.0.0/8").unwrap()],
            key: None,
        };
        out.insert(z.apex.clone(), Arc::new(cfg));
        let base = Served { outgoing: Arc::new(out), ..Default::default() };
        base.with(vec![LoadedZone { source: src, zone: z, journal }], vec![])
    }

    /// The daemon's shared state for one secondary zone `t.` configured by `zone_toml` (its
    /// `[[zone]]` table), and that zone's secondary.
    fn secondary_of(dir: &std::path::Path, zone_toml: &str) -> (Arc<Shared>, Arc<Secondary>) {
        let cfg = parse(&format!("[[zone]]\nname = \"t.\"\n{zone_toml}"), &dir.join("x.toml"), &Overrides::default()).unwrap();
        let (served, _) = build(&cfg, None);
        let shared = Arc::new(Shared::new(served));
        let sec = shared.served.load().xfr.as_ref().unwrap().list()[0].clone();
        (shared, sec)
    }

    fn served_serial(shared: &Shared) -> Option<u32> {
        shared.served.load().zones.find(b"\x01t\x00").map(|z| z.serial)
    }

    /// A secondary against xdns's own primary side: AXFR, then a cut stream and a zone that
    /// does not validate both keep the version served, then an IXFR from the journal.
    #[tokio::test]
    async fn transfers_apply_and_bad_ones_keep_the_old_version() {
        let dir = std::env::temp_dir().join(format!("xdns-secondary-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let v1 = primary_served(&dir, &zone_text(1, 3000), None);
        let pserved = Arc::new(arc_swap::ArcSwap::from_pointee(v1));
        let mode = Arc::new(AtomicU8::new(FULL));
        let paddr = fake_primary(pserved.clone(), mode.clone()).await;

        let (shared, sec) = secondary_of(&dir, &format!("primaries = [\"{paddr}\"]\nfile = \"copy/t.zone\"\n"));

        // first: AXFR (more than one message: 3000 records)
        let t = refresh(&shared, &sec, false).await.unwrap();
        assert_eq!(t.refresh, Duration::from_secs(60));
        assert_eq!(served_serial(&shared), Some(1));
        assert_eq!(sec.info().last_transfer.as_deref(), Some("axfr"));
        assert!(dir.join("copy/t.zone").is_file());

        // the primary moves to serial 2, but the stream is cut after its first message
        let v2 = primary_served(&dir, &zone_text(2, 3001), Some(&pserved.load()));
        assert_eq!(v2.loaded[0].journal.len(), 1);
        pserved.store(Arc::new(v2));
        mode.store(CUT, Ordering::Relaxed);
        sec.retransfer();
        let e = refresh(&shared, &sec, false).await.unwrap_err();
        assert!(e.contains("closed mid-transfer"), "{e}");
        assert_eq!(served_serial(&shared), Some(1), "the old version keeps serving");

        // a zone that does not validate (CNAME and other data at one name)
        let mut bad = (*pserved.load().loaded[0].zone).clone();
        bad.serial = 3;
        let soa = bad.nodes.get_mut(&bad.apex).unwrap().rrsets.iter_mut().find(|r| r.rtype == 6).unwrap();
        let mut rd = soa.rdata[0].to_vec();
        let at = rd.len() - 20;
        rd[at..at + 4].copy_from_slice(&3u32.to_be_bytes());
        soa.rdata.set(0, &rd);
        let node: &mut Node = bad.nodes.get_mut(&b"\x02h1\x01t\x00"[..]).unwrap();
        node.rrsets.push(Rrset { rtype: 5, ttl: 60, rdata: xdns_zone::Rdatas::one(b"\x02ns\x01t\x00") });
        let mut bad_served = primary_served(&dir, &zone_text(2, 3001), None);
        bad_served.loaded[0].zone = Arc::new(bad);
        bad_served.loaded[0].journal = Arc::default();
        let good_v2 = pserved.swap(Arc::new(bad_served));
        mode.store(FULL, Ordering::Relaxed);
        sec.retransfer();
        let e = refresh(&shared, &sec, false).await.unwrap_err();
        assert!(e.contains("did not validate"), "{e}");
        assert_eq!(served_serial(&shared), Some(1), "the old version keeps serving");
        assert!(dir.join("copy/t.zone.new").is_file(), "the rejected copy is left for inspection");

        // the good serial 2: an IXFR from the primary's journal
        pserved.store(good_v2);
        refresh(&shared, &sec, false).await.unwrap();
        assert_eq!(served_serial(&shared), Some(2));
        assert_eq!(sec.info().last_transfer.as_deref(), Some("ixfr"));
        let z = shared.served.load().zones.find(b"\x01t\x00").unwrap().clone();
        assert!(z.nodes.contains_key(&b"\x05h3000\x01t\x00"[..]));
        let how = sec.info().last_apply.unwrap_or_default();
        assert!(how.starts_with("in place: "), "{how}");
        assert_eq!(sec.info().apply_in_place, 1);
        drop(z);
        // and again: up to date, nothing transferred
        let n = sec.info().transfers;
        refresh(&shared, &sec, false).await.unwrap();
        assert_eq!(sec.info().transfers, n);

        // an IXFR whose difference puts a CNAME beside an address: refused, with the reason;
        // serial 2 keeps serving
        let soa = |s: u32| {
            let mut rd = soa_rdata(&pserved.load().loaded[0].zone).unwrap().to_vec();
            let at = rd.len() - 20;
            rd[at..at + 4].copy_from_slice(&s.to_be_bytes());
            Bytes::from(rd)
        };
        let rec = |owner: &[u8], rtype, rdata: Bytes| client::Rec { owner: owner.into(), rtype, ttl: 60, rdata };
        let apex = b"\x01t\x00";
        let d = client::Diff {
            from: 2,
            to: 3,
            deleted: vec![rec(apex, 6, soa(2))],
            added: vec![rec(apex, 6, soa(3)), rec(b"\x02h1\x01t\x00", 5, Bytes::from_static(b"\x02ns\x01t\x00"))],
        };
        let mut v3 = primary_served(&dir, &zone_text(3, 3001), None);
        v3.loaded[0].journal = Arc::new(vec![d]);
        pserved.store(Arc::new(v3));
        let e = refresh(&shared, &sec, false).await.unwrap_err();
        assert!(e.contains("IXFR refused") && e.contains("CNAME beside other data"), "{e}");
        assert_eq!(served_serial(&shared), Some(2), "the old version keeps serving");
        assert_eq!(sec.info().apply_refused, 1);
        let z = shared.served.load().zones.find(apex).unwrap().clone();
        assert!(z.nodes[&b"\x02h1\x01t\x00"[..]].rrset(5).is_none());
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The SOA RDATA of the primary's zone with serial `s`.
    fn soa_with(pserved: &arc_swap::ArcSwap<Served>, s: u32) -> Bytes {
        let mut rd = soa_rdata(&pserved.load().loaded[0].zone).unwrap().to_vec();
        let at = rd.len() - 20;
        rd[at..at + 4].copy_from_slice(&s.to_be_bytes());
        Bytes::from(rd)
    }

    /// RFC 1995 §2 / RFC 5936: a primary that answers IXFR with NOTIMP or FORMERR is asked
    /// for an AXFR; one that refuses (REFUSED) is not; differences that do not apply to our
    /// copy (a deletion of a record we do not hold) are dropped for an AXFR.
    #[tokio::test]
    async fn ixfr_falls_back_to_axfr() {
        let dir = std::env::temp_dir().join(format!("xdns-secondary-fallback-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let pserved = Arc::new(arc_swap::ArcSwap::from_pointee(primary_served(&dir, &zone_text(1, 20), None)));
        let mode = Arc::new(AtomicU8::new(FULL));
        let rcode = Arc::new(AtomicU8::new(0));
        let seen: Arc<Mutex<Vec<u16>>> = Arc::default();
        let paddr = fake_primary_logged(pserved.clone(), mode.clone(), rcode.clone(), seen.clone()).await;
        let (shared, sec) = secondary_of(&dir, &format!("primaries = [\"{paddr}\"]\n"));
        refresh(&shared, &sec, false).await.unwrap();
        assert_eq!(served_serial(&shared), Some(1));
        assert_eq!(std::mem::take(&mut *seen.lock().unwrap()), vec![252], "nothing held: AXFR");

        // NOTIMP, then FORMERR, to our IXFR: an AXFR brings the new serial
        mode.store(IXFR_RCODE, Ordering::Relaxed);
        for (serial, rc) in [(2u32, 4u8), (3, 1)] {
            let next = primary_served(&dir, &zone_text(serial, 20 + serial as usize), Some(&pserved.load()));
            pserved.store(Arc::new(next));
            rcode.store(rc, Ordering::Relaxed);
            refresh(&shared, &sec, false).await.unwrap();
            assert_eq!(served_serial(&shared), Some(serial), "rcode {rc}");
            assert_eq!(sec.info().last_transfer.as_deref(), Some("axfr"), "rcode {rc}");
            assert_eq!(std::mem::take(&mut *seen.lock().unwrap()), vec![251, 252], "rcode {rc}: IXFR, then AXFR");
        }
        let z = shared.served.load().zones.find(b"\x01t\x00").unwrap().clone();
        assert!(z.nodes.contains_key(&b"\x03h22\x01t\x00"[..]));
        drop(z);

        // REFUSED: the primary will not transfer to us at all; no AXFR is tried
        let next = primary_served(&dir, &zone_text(4, 24), Some(&pserved.load()));
        pserved.store(Arc::new(next));
        rcode.store(5, Ordering::Relaxed);
        let e = refresh(&shared, &sec, false).await.unwrap_err();
        assert!(e.contains("REFUSED"), "{e}");
        assert_eq!(std::mem::take(&mut *seen.lock().unwrap()), vec![251]);
        assert_eq!(served_serial(&shared), Some(3));

        // differences from our serial that delete a record our copy does not hold: they do
        // not apply, and the whole zone is transferred instead
        mode.store(FULL, Ordering::Relaxed);
        let rec = |owner: &[u8], rtype, rdata: Bytes| client::Rec { owner: owner.into(), rtype, ttl: 60, rdata };
        let apex = b"\x01t\x00";
        let d = client::Diff {
            from: 3,
            to: 4,
            deleted: vec![rec(apex, 6, soa_with(&pserved, 3)), rec(b"\x02h1\x01t\x00", 1, Bytes::from_static(&[198, 18, 9, 9]))],
            added: vec![rec(apex, 6, soa_with(&pserved, 4))],
        };
        let mut v4 = primary_served(&dir, &zone_text(4, 24), None);
        v4.loaded[0].journal = Arc::new(vec![d]);
        pserved.store(Arc::new(v4));
        refresh(&shared, &sec, false).await.unwrap();
        assert_eq!(served_serial(&shared), Some(4));
        assert_eq!(std::mem::take(&mut *seen.lock().unwrap()), vec![251, 252], "IXFR, then AXFR");
        assert_eq!(sec.info().last_transfer.as_deref(), Some("axfr"));
        let how = sec.info().last_apply.unwrap_or_default();
        assert!(how.starts_with("axfr: "), "{how}");
        let z = shared.served.load().zones.find(apex).unwrap().clone();
        assert!(z.nodes.contains_key(&b"\x03h23\x01t\x00"[..]));
        drop(z);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// RFC 1996: a new serial brought by a transfer is NOTIFIED to the zone's `notify`
    /// targets (a chain of secondaries), and a NOTIFY left unanswered is sent again until the
    /// target answers, then no more.
    #[tokio::test]
    async fn a_transfer_notifies_downstream_and_retries() {
        let dir = std::env::temp_dir().join(format!("xdns-secondary-notify-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let pserved = Arc::new(arc_swap::ArcSwap::from_pointee(primary_served(&dir, &zone_text(7, 5), None)));
        let paddr = fake_primary(pserved.clone(), Arc::new(AtomicU8::new(FULL))).await;
        let target = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let taddr = target.local_addr().unwrap();
        let (shared, sec) = secondary_of(&dir, &format!("primaries = [\"{paddr}\"]\nnotify = [\"{taddr}\"]\n"));
        refresh(&shared, &sec, false).await.unwrap();
        assert_eq!(served_serial(&shared), Some(7));

        let mut buf = vec![0u8; 512];
        async fn recv_within(s: &tokio::net::UdpSocket, buf: &mut [u8], secs: u64) -> Option<(usize, SocketAddr)> {
            tokio::time::timeout(Duration::from_secs(secs), s.recv_from(buf)).await.ok().map(|r| r.unwrap())
        }
        let is_notify = |m: &[u8]| m.len() > 17 && (m[2] >> 3) & 0xf == 4 && m[2] & 0x80 == 0 && &m[12..15] == b"\x01t\x00";
        // the first NOTIFY is ignored
        let (n, from) = recv_within(&target, &mut buf, 5).await.expect("a NOTIFY after the transfer");
        assert!(is_notify(&buf[..n]), "{:?}", &buf[..n]);
        let first_id = [buf[0], buf[1]];
        // it comes again; answered this time
        let (n, from2) = recv_within(&target, &mut buf, 5).await.expect("the NOTIFY again, unanswered");
        assert!(is_notify(&buf[..n]), "{:?}", &buf[..n]);
        assert_eq!(from, from2, "from the same socket");
        assert_ne!([buf[0], buf[1]], first_id, "a new ID for each try");
        let mut r = buf[..n].to_vec();
        r[2] |= 0x80;
        r[3] &= 0xf0;
        target.send_to(&r, from2).await.unwrap();
        // answered: no third try (it would come 2.5 s after the second at the latest)
        assert!(recv_within(&target, &mut buf, 4).await.is_none(), "a NOTIFY after the answer");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
