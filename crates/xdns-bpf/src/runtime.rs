//! The loaded program: open, configure rodata, size maps, load (the verifier runs here),
//! attach with BPF links, install zone data, test-run and read counters.
//!
//! **Zone maps that grow** ([`XdpProgram::install_grown`]). The zone maps (nodes, hashed
//! answers, M and L bodies, the presence filter, the answer table's index and pages) are sized
//! before load ([`Capacity`]), and part of their size is read-only data the verifier folds
//! into the program (filter mask, table buckets and pages). Zone data that outgrows them
//! (a secondary's first transfer, a reload or catalog member that adds many records) is
//! installed into a second instance of the program loaded with larger zone maps: every other
//! map (scratch and counters, resolver cache, allow lists, guard lists and state, telemetry,
//! kernel iteration, the reply memo) is the running program's own, reused by fd before load,
//! so nothing else notices. The new instance's maps are made first (`bpf_object__prepare`),
//! then its verifier runs on a thread of its own while the new data is written into its zone
//! maps through duplicates of their fds (`ZoneMaps`: the loader needs nothing of the loaded
//! program), and the old instance keeps answering from its own maps; once both are done,
//! each XDP link is switched to the new program in one `BPF_LINK_UPDATE` (every packet runs
//! the old program with the old data or the new with the new, whole), and the old instance
//! is dropped with its zone maps. Chosen over
//! inner maps of per-generation sizes (`BPF_F_INNER_MAP`), which the verifier no longer
//! inlines, so every lookup of every packet would pay a helper call, and which would still
//! leave the hash maps and the filter fixed: growing costs one verifier run and a second set
//! of zone maps for the moment of the switch, and nothing per packet
//! (docs/perf/2026-11-29-growing-maps.md).

use std::ffi::CString;
use std::mem::MaybeUninit;
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags, ProgramInput};

use crate::data::{BodyValue, KernelData};
use crate::maps::{bytes_of, KernelMaps, Loader};
use crate::skel::{XdnsSkel, XdnsSkelBuilder};
use crate::data::answer_value;
use crate::types::{xdns_answer, xdns_answer_key, xdns_answer_s, xdns_body_class, xdns_bucket, xdns_node, xdns_node_key};

/// How to attach (the `[xdp] mode` of the configuration).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttachMode {
    Native,
    Generic,
    /// Let the kernel choose (native when the driver supports it).
    Auto,
}

/// Load-time settings (rodata of the program).
#[derive(Clone, Debug)]
pub struct LoadConfig {
    /// The daemon's listen addresses (at most 8; wildcard = any local address).
    pub listen: Vec<SocketAddr>,
    /// Our EDNS UDP payload size.
    pub edns_payload: u16,
    /// Hash seed; `None` = random.
    pub seed: Option<u64>,
    /// Map capacities (entries). Hash maps are not preallocated: memory follows the data.
    pub capacity: Capacity,
    /// The resolver's cache stage (`bpf/cache.h`); `None` = off: names under no served zone
    /// pass as `pass_no_zone`, exactly the authoritative-only program.
    pub resolver: Option<ResolverStage>,
    /// The guard stage (`bpf/guard.h`); `None` = off: one load-time-constant branch, no map
    /// lookup. Lists, tier and features are then driven through [`XdpProgram::guard`].
    pub guard: Option<crate::guard::GuardStage>,
    /// Kernel iteration (`bpf/kit.h`, issue 32; needs `resolver`); `None` = off: a miss
    /// passes as `pass_cache_miss` and the tail calls are dropped by the verifier.
    pub kit: Option<crate::kit::KitStage>,
}

/// Load-time settings of the cache stage.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResolverStage {
    /// Clients that may be answered from the cache (`addr/len`); others pass
    /// (`pass_not_allowed`) for userspace to refuse. Changeable later with
    /// [`XdpProgram::set_allow`].
    pub allow: Vec<(std::net::IpAddr, u8)>,
    /// Values of the three size classes (arrays, allocated at load).
    pub capacity: crate::cache::CacheCapacity,
}

/// Entries each map may hold; a reload needs room for two generations.
#[derive(Clone, Copy, Debug)]
pub struct Capacity {
    /// Nodes of the `xdns_nodes` hash map: the nodes left out of the answer table, and
    /// those in-place updates add or change.
    pub nodes: u32,
    /// Answers of the `xdns_answers` hash map (header + class S body inline): the answers
    /// left out of the answer table.
    pub answers: u32,
    pub bodies_m: u32,
    pub bodies_l: u32,
    /// Keys (answers and nodes) per half of the answer table (its index; 0: as many as
    /// `answers`).
    pub table_vals: u32,
    /// Bytes of answer and node records per half of the answer table (preallocated; 0: 128
    /// per key of `table_vals`).
    pub table_bytes: u64,
}

impl Capacity {
    /// Room for `data`: the answer table holds every answer and node of the first zone set
    /// and an eighth more (a reload that grows further leaves the excess in the hash maps:
    /// same answers, a hash lookup each), in each of its two halves (old and new generations
    /// coexist during a reload); the hash maps three times the bodies of class L, the answers
    /// and the nodes a quarter of the table's (the keys it leaves out: a few percent of a
    /// generation's, its spilled buckets, for two generations during a reload, plus the keys
    /// IXFRs add in place until the next full generation; for the nodes at least twice those
    /// one in-place update may add or change), and twice what the table cannot hold at all
    /// (nodes come last in the fill: they are the first left out); the class M bodies as many of
    /// theirs (a class M body of the table is in its record: only those left out, or changed
    /// in place, have bytes in `xdns_bodies_m`), and at least twice those of the names one
    /// in-place update may change. A hash map that still runs out makes the install grow the
    /// maps.
    pub fn for_data(data: &KernelData) -> Self {
        Self::for_shape(&crate::data::Shape::of(data))
    }

    /// [`Self::for_data`] of data of this shape (exact, or estimated from the zones without
    /// compiling them whole: [`crate::data::Shape::estimate`]).
    pub fn for_shape(shape: &crate::data::Shape) -> Self {
        let room = |n: usize| ((n as u32).saturating_mul(3)).max(1024);
        let n = shape.answers;
        // nodes' records follow the answers', the first on an eight-byte boundary
        let node_bytes = (NODE_RECORD * shape.nodes) as u64;
        let bytes = shape.record_bytes + node_bytes + if shape.nodes > 0 { 4 } else { 0 };
        // keys the table cannot hold at all (past its largest size) go to the hash maps, for
        // both generations of a reload: the nodes first (written last), then answers
        let past = bytes.saturating_sub(TABLE_MAX_BYTES as u64);
        let over_nodes = past.min(node_bytes) / NODE_RECORD as u64;
        let over = past.saturating_sub(node_bytes) * n as u64 / shape.record_bytes.max(1);
        let over_m = over * shape.class_m as u64 / (n as u64).max(1);
        // a class M body changed in place leaves the table for xdns_bodies_m, under a version
        // (two for a moment when it changes again): room for the bodies of as many names as
        // one update may change in place (IN_PLACE_MIN_NAMES, or an eighth of the names),
        // three each (a signed name's DO=1 NODATA, referral, DS answer), twice
        let in_place = 2 * shape.class_m.min(3 * IN_PLACE_MIN_NAMES.max(shape.nodes / 8));
        let in_place_nodes = 2 * IN_PLACE_MIN_NAMES.max(shape.nodes / 8);
        Self {
            nodes: ((shape.nodes / 4).max(in_place_nodes) as u32).saturating_add((over_nodes as u32).saturating_mul(2)).max(1024),
            answers: ((n / 4) as u32).saturating_add((over as u32).saturating_mul(2)).max(1024),
            bodies_m: ((shape.class_m / 4).max(in_place) as u32).saturating_add((over_m as u32).saturating_mul(2)).max(1024),
            bodies_l: room(shape.class_l),
            table_vals: ((n + shape.nodes) + (n + shape.nodes) / 8) as u32,
            table_bytes: bytes + bytes / 8,
        }
    }

    /// Words per half of the presence filter: 16 bits per key the answer table can hold and
    /// per node of the hash map (so about 20 per key of the first zone set before the
    /// rounding up), a power of two between 64 words (512 B) and 2^22 (32 MiB).
    pub fn filter_words(&self) -> usize {
        let keys = u64::from(self.nodes) + self.table_keys().max(self.answers as usize) as u64;
        ((keys * 16 / 64) as usize).next_power_of_two().clamp(64, 1 << 22)
    }

    fn table_keys(&self) -> usize {
        (if self.table_vals == 0 { self.answers } else { self.table_vals }) as usize
    }

    /// Bytes of answer records per half of the answer table: `table_bytes` (or 128 per
    /// answer) in whole pages, between one page and [`TABLE_MAX_BYTES`]. Preallocated
    /// (arrays): each record takes what it needs (`data::record_len`: 24 bytes of header,
    /// then a class S body's bytes and fixups).
    pub fn table_bytes(&self) -> usize {
        let want = if self.table_bytes == 0 { 128 * self.table_keys() as u64 } else { self.table_bytes };
        (want as usize).next_multiple_of(crate::data::PAGE).clamp(crate::data::PAGE, TABLE_MAX_BYTES)
    }

    /// Pages per half of the answer table's values.
    pub fn table_pages(&self) -> usize {
        self.table_bytes() / crate::data::PAGE
    }

    /// Buckets per half of the answer table's index: four entries each, twice as many
    /// entries as keys (answers and nodes) (so a bucket that overflows, and spills a key to the hash map, is
    /// rare: the measured share is in docs/perf/2026-11-29-streamed-fill.md), and at least
    /// [`TABLE_MIN_BUCKETS`], so that a small zone set (a few hundred answers, where one full
    /// bucket is a larger share) practically never leaves an answer out.
    pub fn table_buckets(&self) -> usize {
        self.table_keys().div_ceil(2).clamp(TABLE_MIN_BUCKETS, TABLE_MAX_BYTES / 64)
    }
}

/// Bytes of a node's record in the answer table (`struct xdns_node`).
pub const NODE_RECORD: usize = std::mem::size_of::<xdns_node>();

/// Fewest names an in-place update may change (the daemon's limit: this, or an eighth of the
/// zone's names, whichever is more); `xdns_bodies_m` has room for their class M bodies.
pub const IN_PLACE_MIN_NAMES: usize = 4096;

/// Most bytes of answer records per half of the answer table; answers beyond them are found
/// in `xdns_answers` (a hash-map lookup each). 3.75 GiB: a record's address is 30 bits of
/// four-byte units (`XDNS_VAL_ADDR`), which must also reach the spill slots after the pages,
/// and the page array (pages with their slack) stays below 4 GiB.
pub const TABLE_MAX_BYTES: usize = 15 << 28;
const _: () = assert!(
    (TABLE_MAX_BYTES / crate::data::PAGE + 1) * PAGE_VALUE < 1 << 32
        && (TABLE_MAX_BYTES + crate::data::PAGE) / 4 <= 0x3fff_ffff
);

/// Fewest buckets per half of the answer table's index (64 KiB of index: 4,096 entries).
pub const TABLE_MIN_BUCKETS: usize = 1024;

impl Capacity {
    /// Do maps of this capacity hold what `need` asks for ([`Self::for_data`] of a new zone
    /// set: the new data with the start-up sizing's headroom)? When they do not, the data is
    /// installed into grown maps ([`XdpProgram::install_grown`]) rather than left, whole or
    /// in part, to userspace or to the hash map.
    pub fn holds(&self, need: &Capacity) -> bool {
        self.nodes >= need.nodes
            && self.answers >= need.answers
            && self.bodies_m >= need.bodies_m
            && self.bodies_l >= need.bodies_l
            && self.table_buckets() >= need.table_buckets()
            && self.table_bytes() >= need.table_bytes()
    }

    /// Each map at the larger of the two sizes: what maps grown for `need` are given, so that
    /// growing never shrinks a map another zone set filled (no back and forth between sizes).
    pub fn max(&self, need: &Capacity) -> Capacity {
        Capacity {
            nodes: self.nodes.max(need.nodes),
            answers: self.answers.max(need.answers),
            bodies_m: self.bodies_m.max(need.bodies_m),
            bodies_l: self.bodies_l.max(need.bodies_l),
            table_vals: self.table_keys().max(need.table_keys()) as u32,
            table_bytes: self.table_bytes().max(need.table_bytes()) as u64,
        }
    }
}

/// The sizes of the zone maps, for the log: entries of the hash maps, and the answer table's
/// index (answers) and pages (KiB) per generation.
impl std::fmt::Display for Capacity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} hashed nodes, {} hashed answers, {}/{} M/L bodies, a table of {} keys in {} KiB",
            self.nodes,
            self.answers,
            self.bodies_m,
            self.bodies_l,
            self.table_keys(),
            self.table_bytes() >> 10
        )
    }
}

/// Maps of the program that hold zone data or follow from it, made new (not reused) when the
/// program is loaded again with larger zone maps ([`XdpProgram::install_grown`]): the
/// generation and its memo epoch, the presence filter, the answer table, the hash maps of
/// nodes, answers and bodies, the question memo (its entries name answers of the table),
/// and the two program arrays, which hold the loaded object's own tail-called programs.
/// Every other map is the running program's, reused by fd. Read-only data (`.rodata`) is
/// always the new object's: it carries the new sizes.
pub const ZONE_MAPS: [&str; 11] = [
    "xdns_gen",
    "xdns_filter",
    "xdns_index",
    "xdns_vals",
    "xdns_nodes",
    "xdns_answers",
    "xdns_bodies_m",
    "xdns_bodies_l",
    "xdns_memo",
    "xdns_tel_prog",
    "xdns_kit_prog",
];

/// The XDP program with its maps, attachments and loaded data.
pub struct XdpProgram {
    skel: XdnsSkel<'static>,
    /// The zone maps the loader writes, by fd ([`ZoneMaps`]).
    zone: ZoneMaps,
    loader: Loader,
    links: Vec<(String, OwnedFd)>,
    /// The cache writer, made on first use: its clones share one placement state.
    cache: std::sync::OnceLock<crate::cache::KernelCache>,
    /// Set when the process stops: a fill or reload under way gives up ([`Self::abandon_handle`]).
    abandon: Arc<AtomicBool>,
    /// How far the install under way has got ([`Self::fill_progress`]).
    progress: Arc<crate::maps::FillProgress>,
    /// The answer table's maps by generation parity (`xdns_vals`, `xdns_index`, maps.h): the
    /// active generation's, and the staged one's during a reload.
    halves: std::sync::Mutex<[Option<TableHalf>; 2]>,
    /// Pages of each page array: the table's pages, then the spill slots.
    vals_entries: u32,
    /// What it was loaded with: loading it again with larger zone maps
    /// ([`Self::install_grown`]) keeps everything else.
    cfg: LoadConfig,
    /// What status readers read that a grown program replaces.
    live: Arc<std::sync::RwLock<Live>>,
    /// How long its load took, part by part ([`Self::load_timing`]).
    timing: LoadTiming,
}

/// How long a program's load took, part by part ([`XdpProgram::load_timing`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct LoadTiming {
    /// Opening the object and making its maps (`bpf_object__prepare`).
    pub prepare: std::time::Duration,
    /// The verifier (`bpf_object__load`): on a thread of its own when the maps were filled
    /// beside it.
    pub verifier: std::time::Duration,
    /// The fill written beside the verifier (`None`: the program was loaded first, alone).
    pub fill: Option<std::time::Duration>,
    /// How long the filled maps waited for the verifier to finish.
    pub waited: std::time::Duration,
}

/// An object opened, configured and prepared (its maps made), not loaded: the verifier has
/// not run ([`XdpProgram::prepare`]).
struct Prepared {
    open: Unloaded,
    zone: ZoneMaps,
    seed: u64,
    vals_entries: u32,
    /// The templates of the answer table's inner maps (pages, index): they live until the
    /// load, the kernel keeps their shape.
    templates: (libbpf_rs::MapHandle, libbpf_rs::MapHandle),
}

/// The open skeleton of a prepared object, handed to the verifier's thread.
struct Unloaded(crate::skel::OpenXdnsSkel<'static>);

// SAFETY: the open skeleton is plain data over libbpf's object (pointers into memory it owns,
// or into the leaked object storage); libbpf's objects are not tied to a thread. It is moved
// whole to one thread, the only one that touches the object until it is loaded and returned;
// meanwhile the other thread writes the maps only through duplicates of their fds
// ([`ZoneMaps`]).
unsafe impl Send for Unloaded {}

impl Unloaded {
    /// Load the program (the verifier runs).
    fn load(self) -> libbpf_rs::Result<XdnsSkel<'static>> {
        self.0.load()
    }
}

/// The parts of the program a [`StatusReader`] reads that change when the zone maps grow
/// ([`XdpProgram::install_grown`] loads a new program, with its own `xdns_gen`).
struct Live {
    gen: libbpf_rs::MapHandle,
    prog_id: u32,
}

/// One generation's answer table in the kernel: its page array (`xdns_vals`) and its index
/// (`xdns_index`), each a map of its own held in the outer map's slot of its parity. Both are
/// mmapable: the fill writes the records through a window of `pages` as the chunks come, and
/// the index at the end, instead of a batch syscall per chunk (in-place updates still use
/// syscalls, a bucket at a time).
struct TableHalf {
    /// The page array, held by the fd of its window: the part the fill is writing is mapped
    /// (unmapped once the index is written).
    pages: crate::window::ArrayWindow,
    index: libbpf_rs::MapHandle,
}

impl XdpProgram {
    /// Open and load the program (runs the verifier). No data, not attached.
    pub fn load(cfg: &LoadConfig) -> Result<Self> {
        Self::load_reusing(cfg, None)
    }

    /// [`Self::load`]; with `reuse`, every map not in [`ZONE_MAPS`] is `reuse`'s own (its fd
    /// given to the new object before load), its seed is kept (the cache and guard keys
    /// depend on it), its maps are not initialised again, and the new loader continues from
    /// its generation.
    fn load_reusing(cfg: &LoadConfig, reuse: Option<&XdpProgram>) -> Result<Self> {
        let t = std::time::Instant::now();
        let p = Self::prepare(cfg, reuse)?;
        let prepared = t.elapsed();
        let skel = p.open.load().context("loading the XDP program (verifier)")?;
        let timing = LoadTiming { prepare: prepared, verifier: t.elapsed() - prepared, ..Default::default() };
        let loader = match reuse {
            Some(old) => Loader::after(p.seed, old.generation()),
            None => Loader::new(p.seed),
        };
        let (abandon, progress) = Self::shared_state(reuse);
        drop(p.templates);
        Self::finish(cfg, reuse, skel, p.zone, loader, p.seed, p.vals_entries, std::sync::Mutex::default(), abandon, progress, timing)
    }

    /// The abandon flag and fill progress of a new program: `reuse`'s own (one a grown
    /// program replaces), so that those holding them see the new program's fill.
    fn shared_state(reuse: Option<&XdpProgram>) -> (Arc<AtomicBool>, Arc<crate::maps::FillProgress>) {
        (
            reuse.map_or_else(|| Arc::new(AtomicBool::new(false)), |old| old.abandon.clone()),
            reuse.map_or_else(Arc::default, |old| old.progress.clone()),
        )
    }

    /// [`Self::load_reusing`] with the entries of `src` installed as its first generation,
    /// written while the verifier runs: the object is prepared (`bpf_object__prepare`: its
    /// maps are made, the program is not loaded), then one thread runs the verifier
    /// (`bpf_object__load`) while this one fills the new zone maps through duplicates of their
    /// fds ([`ZoneMaps`], which do not depend on the loaded program); the program is returned
    /// when both are done. The new program is attached to nothing: no packet reads its maps
    /// until the caller switches links to it. `before_verifier` runs on the verifier's thread
    /// before it starts (tests: hold the verifier until the fill is written).
    fn load_filled(
        cfg: &LoadConfig,
        reuse: Option<&XdpProgram>,
        src: crate::maps::Stream<'_>,
        before_verifier: Option<Box<dyn FnOnce() + Send>>,
    ) -> Result<Self> {
        let t = std::time::Instant::now();
        let p = Self::prepare(cfg, reuse)?;
        let prepared = t.elapsed();
        let mut loader = match reuse {
            Some(old) => Loader::after(p.seed, old.generation()),
            None => Loader::new(p.seed),
        };
        let (abandon, progress) = Self::shared_state(reuse);
        let halves = std::sync::Mutex::default();
        let Prepared { open, zone, seed, vals_entries, templates } = p;
        let (filled, loaded, fill_time, waited) = std::thread::scope(|s| {
            let verifier = std::thread::Builder::new().name("xdns-verifier".into()).spawn_scoped(s, move || {
                if let Some(hook) = before_verifier {
                    hook();
                }
                let t = std::time::Instant::now();
                let skel = open.load();
                (skel, t.elapsed())
            });
            let verifier = match verifier {
                Ok(v) => v,
                Err(e) => return (Err(anyhow::anyhow!("starting the verifier's thread: {e}")), None, Default::default(), Default::default()),
            };
            let mut maps = LibbpfMaps { zone: &zone, abandon: &abandon, progress: &progress, halves: &halves, vals_entries };
            let t = std::time::Instant::now();
            let filled = loader.install_stream(&mut maps, src);
            let fill_time = t.elapsed();
            let loaded = verifier.join();
            (filled, Some(loaded), fill_time, t.elapsed() - fill_time)
        });
        drop(templates);
        // the fill's error first: an abandoned fill must be seen as such by the caller
        let (skel, verified) = match loaded {
            Some(Ok((skel, verified))) => (skel, verified),
            Some(Err(_)) => bail!("the verifier's thread panicked"),
            None => return filled.map(|()| unreachable!("no verifier thread, no fill")),
        };
        filled?;
        let skel = skel.context("loading the XDP program (verifier)")?;
        let timing = LoadTiming { prepare: prepared, verifier: verified, fill: Some(fill_time), waited };
        Self::finish(cfg, reuse, skel, zone, loader, seed, vals_entries, halves, abandon, progress, timing)
    }

    /// Open the object and configure it for `cfg` (rodata, map sizes, `reuse`'s maps by fd),
    /// then make its maps (`bpf_object__prepare`) without loading the program: the verifier
    /// has not run.
    fn prepare(cfg: &LoadConfig, reuse: Option<&XdpProgram>) -> Result<Prepared> {
        if cfg.listen.len() > 8 {
            bail!("the XDP program handles at most 8 listen addresses ({} given)", cfg.listen.len());
        }
        // The skeleton borrows its object storage for the program's whole life: leak one
        // small allocation per load (the daemon loads once).
        let storage: &'static mut MaybeUninit<libbpf_rs::OpenObject> = Box::leak(Box::new(MaybeUninit::uninit()));
        let mut open = XdnsSkelBuilder::default().open(storage).context("opening the XDP object")?;
        let seed = match reuse {
            Some(old) => old.seed(),
            None => cfg.seed.unwrap_or_else(rand::random),
        };
        let guard = cfg.guard.clone();
        {
            let ro = open.maps.rodata_data.as_deref_mut().context("rodata not mapped")?;
            let c = &mut ro.xdns_cfg;
            c.seed = seed;
            c.edns_payload = cfg.edns_payload;
            c.nlisten = cfg.listen.len() as u16;
            for (slot, sa) in c.listen.iter_mut().zip(&cfg.listen) {
                slot.port = sa.port();
                match sa.ip() {
                    std::net::IpAddr::V4(a) => {
                        slot.family = 4;
                        slot.wildcard = u8::from(a.is_unspecified());
                        slot.addr[..4].copy_from_slice(&a.octets());
                    }
                    std::net::IpAddr::V6(a) => {
                        slot.family = 6;
                        slot.wildcard = u8::from(a.is_unspecified());
                        slot.addr.copy_from_slice(&a.octets());
                    }
                }
            }
        }
        // The cache's arrays are allocated at load: the smallest size when the stage is off.
        let cc = cfg.resolver.as_ref().map_or(crate::cache::CacheCapacity { s: 64, m: 64, l: 64 }, |r| r.capacity);
        let cc = crate::cache::CacheCapacity { s: cc.s.max(64), m: cc.m.max(64), l: cc.l.max(64) };
        {
            let ro = open.maps.rodata_data.as_deref_mut().context("rodata not mapped")?;
            ro.xdns_cfg.resolver = u8::from(cfg.resolver.is_some());
            ro.xdns_cfg.filter_mask = (cfg.capacity.filter_words() - 1) as u32;
            ro.xdns_cfg.table_buckets = cfg.capacity.table_buckets() as u32;
            ro.xdns_cfg.val_pages = cfg.capacity.table_pages() as u32;
            ro.xdns_cfg.cache_mask = cc.buckets() - 1;
            ro.xdns_cfg.guard = u8::from(guard.is_some());
            ro.xdns_cfg.guard_features = u8::from(guard.as_ref().is_some_and(|g| g.features));
        }
        if let Some(k) = &cfg.kit {
            if cfg.resolver.is_none() {
                bail!("kernel iteration needs the resolver's cache stage");
            }
            let ro = open.maps.rodata_data.as_deref_mut().context("rodata not mapped")?;
            ro.xdns_kit_cfg.on = 1;
            ro.xdns_kit_cfg.port_lo = k.ports.0;
            ro.xdns_kit_cfg.port_hi = k.ports.1;
            ro.xdns_kit_cfg.edns_payload = cfg.edns_payload;
            open.maps.xdns_kit_pending.set_max_entries(k.pending.max(1))?;
            open.maps.xdns_kit_zones.set_max_entries(k.zones.max(1))?;
        } else {
            open.maps.xdns_kit_pending.set_max_entries(1)?;
            open.maps.xdns_kit_zones.set_max_entries(1)?;
            open.maps.xdns_kit_hops.set_max_entries(1)?;
            // no handover without the stage: one page instead of 4 MiB
            open.maps.xdns_kit_events.set_max_entries(4096)?;
        }
        crate::guard::size_maps(&mut open, guard.as_ref())?;
        open.maps.xdns_cache_idx.set_max_entries(cc.buckets())?;
        open.maps.xdns_cache_s.set_max_entries(cc.s)?;
        open.maps.xdns_cache_m.set_max_entries(cc.m)?;
        open.maps.xdns_cache_l.set_max_entries(cc.l)?;
        if cfg.resolver.is_none() {
            // no events without the stage: one page instead of 256 KiB
            open.maps.xdns_cache_events.set_max_entries(4096)?;
        }
        let c = cfg.capacity;
        open.maps.xdns_nodes.set_max_entries(c.nodes)?;
        open.maps.xdns_answers.set_max_entries(c.answers)?;
        open.maps.xdns_bodies_m.set_max_entries(c.bodies_m)?;
        open.maps.xdns_bodies_l.set_max_entries(c.bodies_l)?;
        open.maps.xdns_filter.set_max_entries(2 * c.filter_words() as u32)?;
        // xdns_index likewise holds one index per generation (maps.h)
        let index_template = new_index(c.table_buckets() as u32).context("creating the answer table index's template")?;
        open.maps.xdns_index.set_inner_map_fd(index_template.as_fd())?;
        // two halves, then a spill slot per CPU (lookup.h)
        let cpus = libbpf_rs::num_possible_cpus().context("counting possible CPUs")? as u32;
        let spill_pages = (cpus as usize * crate::data::SPILL_SLOT).div_ceil(crate::data::PAGE) as u32;
        // xdns_vals holds one page array per generation (made when the generation is staged):
        // its template's size is every page array's (maps.h)
        let vals_entries = c.table_pages() as u32 + spill_pages;
        // the template lives until the load: the kernel keeps its shape, not the array
        let vals_template = new_val_pages(vals_entries).context("creating the answer table pages' template")?;
        open.maps.xdns_vals.set_inner_map_fd(vals_template.as_fd())?;
        // a run of memo slots per CPU (maps.h): the object's max_entries is XDNS_MEMO_SLOTS
        let slots = open.maps.xdns_memo.max_entries();
        open.maps.xdns_memo.set_max_entries(cpus * slots)?;
        // the reply memo's run of slots per CPU likewise, with the cache stage only (reply.h)
        let slots = if cfg.resolver.is_some() { open.maps.xdns_replies.max_entries() } else { 1 };
        open.maps.xdns_replies.set_max_entries(cpus * slots)?;
        if let Some(old) = reuse {
            // last, so that the reused maps' own sizes replace those set above
            use libbpf_rs::skel::{OpenSkel as _, Skel as _};
            let olds: std::collections::HashMap<String, std::os::fd::RawFd> = old
                .skel
                .object()
                .maps()
                .map(|m| (m.name().to_string_lossy().into_owned(), m.as_fd().as_raw_fd()))
                .collect();
            for mut m in open.open_object_mut().maps_mut() {
                let name = m.name().to_string_lossy().into_owned();
                if name.contains('.') || ZONE_MAPS.contains(&name.as_str()) {
                    continue;
                }
                let fd = *olds.get(&name).with_context(|| format!("the running program has no map {name} to reuse"))?;
                // SAFETY: `fd` is the map's fd owned by `old`'s skeleton, which outlives this
                // call; libbpf duplicates it.
                m.reuse_fd(unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) }).with_context(|| format!("reusing map {name}"))?;
            }
        }
        {
            use libbpf_rs::AsRawLibbpf as _;
            let obj = open.open_object_mut().as_libbpf_object();
            // SAFETY: `obj` is the open skeleton's object, configured and not yet prepared
            // nor loaded; libbpf makes its maps (and relocates the programs) here.
            let rc = unsafe { libbpf_sys::bpf_object__prepare(obj.as_ptr()) };
            if rc != 0 {
                bail!("making the XDP object's maps (bpf_object__prepare): {}", std::io::Error::from_raw_os_error(-rc));
            }
        }
        let zone = ZoneMaps::of(open.open_object(), &cfg.capacity)?;
        Ok(Prepared { open: Unloaded(open), zone, seed, vals_entries, templates: (vals_template, index_template) })
    }

    /// The program loaded from a prepared object (`skel`, its zone maps `zone`): what
    /// follows the verifier (the live handles, the allow list and the guard's maps of a first
    /// load, the program arrays of the tail calls).
    #[allow(clippy::too_many_arguments)]
    fn finish(
        cfg: &LoadConfig,
        reuse: Option<&XdpProgram>,
        skel: XdnsSkel<'static>,
        zone: ZoneMaps,
        loader: Loader,
        seed: u64,
        vals_entries: u32,
        halves: std::sync::Mutex<[Option<TableHalf>; 2]>,
        abandon: Arc<AtomicBool>,
        progress: Arc<crate::maps::FillProgress>,
        timing: LoadTiming,
    ) -> Result<Self> {
        let live = Live {
            gen: libbpf_rs::MapHandle::try_from(&skel.maps.xdns_gen).context("duplicating the generation map's fd")?,
            prog_id: prog_info(skel.progs.xdns_xdp.as_fd().as_raw_fd())?.id,
        };
        let prog = Self {
            skel,
            zone,
            loader,
            links: Vec::new(),
            cache: std::sync::OnceLock::new(),
            abandon,
            progress,
            halves,
            vals_entries,
            cfg: LoadConfig { seed: Some(seed), ..cfg.clone() },
            live: Arc::new(std::sync::RwLock::new(live)),
            timing,
        };
        if reuse.is_some() {
            // the allow lists and the guard's state are the running program's, in use
        } else {
            if let Some(r) = &cfg.resolver {
                prog.set_allow(&r.allow)?;
            }
            crate::guard::init_maps(&prog)?;
        }
        // the telemetry stage's end half, reached by a tail call (bpf/telemetry.h)
        let tel_fd = prog.skel.progs.xdns_tel_xdp.as_fd().as_raw_fd();
        prog.skel.maps.xdns_tel_prog.update(&0u32.to_ne_bytes(), &tel_fd.to_ne_bytes(), MapFlags::ANY).context("setting the telemetry program")?;
        // kernel iteration's two sides, reached by tail calls (bpf/kit.h)
        if cfg.kit.is_some() {
            let out_fd = prog.skel.progs.xdns_kit_out_xdp.as_fd().as_raw_fd();
            let in_fd = prog.skel.progs.xdns_kit_in_xdp.as_fd().as_raw_fd();
            let slots = &prog.skel.maps.xdns_kit_prog;
            slots.update(&0u32.to_ne_bytes(), &out_fd.to_ne_bytes(), MapFlags::ANY).context("setting kernel iteration's miss program")?;
            slots.update(&1u32.to_ne_bytes(), &in_fd.to_ne_bytes(), MapFlags::ANY).context("setting kernel iteration's response program")?;
        }
        Ok(prog)
    }

    /// Kernel iteration's maps (zones, pending queries, counters), on duplicated fds.
    pub fn kit(&self) -> Result<crate::kit::KitMaps> {
        let m = &self.skel.maps;
        let dup = |map: &libbpf_rs::Map<'_>| libbpf_rs::MapHandle::try_from(map).context("duplicating a kernel iteration map's fd");
        Ok(crate::kit::KitMaps::new(dup(&m.xdns_kit_zones)?, dup(&m.xdns_kit_pending)?, dup(&m.xdns_kit_scratch)?, dup(&m.xdns_kit_events)?, dup(&m.xdns_kit_ctl)?, dup(&m.xdns_kit_hops)?, self.loader.seed()))
    }

    /// `(translated instructions, instructions the verifier processed)` of kernel
    /// iteration's two programs (`xdns_kit_out_xdp`, `xdns_kit_in_xdp`), each verified alone.
    pub fn kit_insn_counts(&self) -> Result<[(usize, usize); 2]> {
        let c = |fd| -> Result<(usize, usize)> {
            let info = prog_info(fd)?;
            Ok((info.xlated_prog_len as usize / 8, info.verified_insns as usize))
        };
        Ok([c(self.skel.progs.xdns_kit_out_xdp.as_fd().as_raw_fd())?, c(self.skel.progs.xdns_kit_in_xdp.as_fd().as_raw_fd())?])
    }

    /// The telemetry stage's maps (rules, histograms, dnstap events), on duplicated fds.
    pub fn telemetry(&self) -> Result<crate::telemetry::TelemetryMaps> {
        let m = &self.skel.maps;
        Ok(crate::telemetry::TelemetryMaps::new(
            libbpf_rs::MapHandle::try_from(&m.xdns_tel_ctl).context("duplicating the telemetry control map's fd")?,
            libbpf_rs::MapHandle::try_from(&m.xdns_tel_hist).context("duplicating the telemetry histogram map's fd")?,
            libbpf_rs::MapHandle::try_from(&m.xdns_tel_events).context("duplicating the telemetry events map's fd")?,
        ))
    }

    /// `(translated instructions, instructions the verifier processed)` of the telemetry
    /// stage's end half, a program of its own (`xdns_tel_xdp`).
    pub fn telemetry_insn_count(&self) -> Result<(usize, usize)> {
        let info = prog_info(self.skel.progs.xdns_tel_xdp.as_fd().as_raw_fd())?;
        Ok((info.xlated_prog_len as usize / 8, info.verified_insns as usize))
    }

    /// The generated skeleton, for the other modules of this crate (guard.rs).
    pub(crate) fn skel(&self) -> &XdnsSkel<'static> {
        &self.skel
    }

    /// Is the cache stage on (`LoadConfig::resolver`)?
    pub fn resolver_enabled(&self) -> bool {
        self.skel.maps.rodata_data.is_some_and(|ro| ro.xdns_cfg.resolver != 0)
    }

    /// The writer of the cache maps (`Send + Sync`, usable from any thread; its mappings keep
    /// the maps alive after the program is dropped). Every call returns a clone of the same
    /// writer. Entries written while the stage is off are never read.
    pub fn cache(&self) -> Result<crate::cache::KernelCache> {
        if let Some(c) = self.cache.get() {
            return Ok(c.clone());
        }
        let m = &self.skel.maps;
        let c = crate::cache::KernelCache::new(
            self.seed(),
            m.xdns_cache_idx.as_fd(),
            [m.xdns_cache_s.as_fd(), m.xdns_cache_m.as_fd(), m.xdns_cache_l.as_fd()],
        )
        .map_err(anyhow::Error::msg)?;
        // Two first callers at once: one state wins, the other's mappings are dropped unused.
        Ok(self.cache.get_or_init(|| c).clone())
    }

    /// Start a reader of the refresh events (one per entry hit in its prefetch window).
    /// Usually called once; each reader consumes events, so two readers split them.
    pub fn prefetch_events(&self) -> Result<crate::cache::PrefetchEvents> {
        crate::cache::PrefetchEvents::start(self.skel.maps.xdns_cache_events.as_fd().try_clone_to_owned()?)
    }

    /// Replace the resolver's allow list (prefixes `addr/len`): new prefixes are added before
    /// stale ones are removed, so a client in both lists is never refused in between. Then the
    /// short-list table (`xdns_allow_inline`, what the program checks first) is written to its
    /// inactive slot and switched to in one update.
    pub fn set_allow(&self, allow: &[(std::net::IpAddr, u8)]) -> Result<()> {
        let map = &self.skel.maps.xdns_allow;
        let mut want = Vec::new();
        let mut keys = Vec::new();
        for (a, l) in allow {
            let k = crate::cache::allow_key(*a, *l)?;
            want.push(bytes_of(&k).to_vec());
            keys.push(k);
        }
        for k in &want {
            map.update(k, &[1u8], MapFlags::ANY).context("writing the allow list")?;
        }
        let stale: Vec<Vec<u8>> = map.keys().filter(|k| !want.contains(k)).collect();
        for k in stale {
            let _ = map.delete(&k);
        }
        let inline = &self.skel.maps.xdns_allow_inline;
        let table = crate::cache::allow_table(&keys);
        let active = inline
            .lookup(&0u32.to_ne_bytes(), MapFlags::ANY)?
            .and_then(|v| v.get(..4).map(|b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]])))
            .unwrap_or(0);
        let next: u32 = if active == 1 { 2 } else { 1 };
        inline.update(&next.to_ne_bytes(), bytes_of(&*table), MapFlags::ANY).context("writing the allow table")?;
        let sel = crate::types::xdns_allow_table { n: next, ..Default::default() };
        inline.update(&0u32.to_ne_bytes(), bytes_of(&sel), MapFlags::ANY).context("switching the allow table")?;
        Ok(())
    }

    /// The hash seed of this load.
    pub fn seed(&self) -> u64 {
        self.loader.seed()
    }

    /// The active data generation.
    pub fn generation(&self) -> u32 {
        self.loader.generation()
    }

    /// Of the active generation's answers: how many are in the answer table, and how many
    /// are only in the `xdns_answers` hash map (no room in the table).
    pub fn table_counts(&self) -> (usize, usize) {
        self.loader.table_counts()
    }

    /// Of the active generation's nodes: how many are in the answer table, and how many are
    /// in the `xdns_nodes` hash map (no room in the table, or changed in place).
    pub fn node_counts(&self) -> (usize, usize) {
        self.loader.node_counts()
    }

    /// The question memo's counters summed over CPUs (`bpf/memo.h`): questions answered
    /// through it, and questions written into it (a resolver program: cache hits through a
    /// hint, and hints written).
    pub fn memo_counts(&self) -> Result<(u64, u64)> {
        memo_counters(&self.skel.maps.xdns_scratch)
    }

    /// The reply memo's counters summed over CPUs (`bpf/reply.h`): cache hits answered with
    /// a reply kept whole for their exact query, and replies kept.
    pub fn reply_counts(&self) -> Result<(u64, u64)> {
        reply_counters(&self.skel.maps.xdns_scratch)
    }

    /// A reader of the counters and the active generation for another thread
    /// ([`StatusReader`]).
    pub fn status_reader(&self) -> Result<StatusReader> {
        let m = &self.skel.maps;
        Ok(StatusReader {
            scratch: libbpf_rs::MapHandle::try_from(&m.xdns_scratch).context("duplicating the scratch map's fd")?,
            live: self.live.clone(),
            guard: m.rodata_data.as_ref().is_some_and(|r| r.xdns_cfg.guard != 0),
        })
    }

    /// The maps, as the loader writes them.
    fn maps(&self) -> LibbpfMaps<'_> {
        LibbpfMaps { zone: &self.zone, abandon: &self.abandon, progress: &self.progress, halves: &self.halves, vals_entries: self.vals_entries }
    }

    /// A flag that makes an install under way (a fill or reload, on another thread) give up
    /// at its next chunk with [`crate::maps::Abandoned`], for a process that is stopping: the
    /// generation it was writing is left in the maps, which go with the program. The active
    /// data is untouched, so packets are answered as before until the program goes.
    pub fn abandon_handle(&self) -> Arc<AtomicBool> {
        self.abandon.clone()
    }

    /// Entries written by the install under way (or the last one) and its total, readable
    /// from other threads while it runs.
    pub fn fill_progress(&self) -> Arc<crate::maps::FillProgress> {
        self.progress.clone()
    }

    /// The answer table's page arrays in `xdns_vals` by generation parity: each one's map id,
    /// `None` for an empty slot (tests: only the generations alive have one); an error when
    /// `xdns_index` does not have an index in the same slots.
    #[doc(hidden)]
    pub fn val_page_arrays(&self) -> Result<[Option<u32>; 2]> {
        let mut out = [None; 2];
        for (half, slot) in out.iter_mut().enumerate() {
            let id = |m: &libbpf_rs::Map<'_>| -> Result<Option<u32>> {
                let v = m.lookup(&(half as u32).to_ne_bytes(), MapFlags::ANY)?;
                Ok(v.map(|v| u32::from_ne_bytes(v[..4].try_into().expect("4-byte map id"))))
            };
            let (pages, index) = (id(&self.skel.maps.xdns_vals)?, id(&self.skel.maps.xdns_index)?);
            if pages.is_some() != index.is_some() {
                bail!("generation parity {half}: page array {pages:?} but index {index:?}");
            }
            *slot = pages;
        }
        Ok(out)
    }

    /// Install `data` as a new generation (atomic for packets; see [`crate::maps`]).
    pub fn install(&mut self, data: &KernelData) -> Result<()> {
        self.install_stream(crate::maps::Stream::of(data))
    }

    /// Install the entries of `src` as a new generation, written as they come (e.g. compiled
    /// one key at a time: [`crate::maps::Stream::compile`]).
    pub fn install_stream(&mut self, src: crate::maps::Stream<'_>) -> Result<()> {
        let mut maps = LibbpfMaps { zone: &self.zone, abandon: &self.abandon, progress: &self.progress, halves: &self.halves, vals_entries: self.vals_entries };
        self.loader.install_stream(&mut maps, src)
    }

    /// Every map of the program by name, with its kernel id (tests: which maps a grown
    /// program reused).
    #[doc(hidden)]
    pub fn map_ids(&self) -> Result<Vec<(String, u32)>> {
        use libbpf_rs::skel::Skel as _;
        self.skel.object().maps().map(|m| Ok((m.name().to_string_lossy().into_owned(), m.info()?.info.id))).collect()
    }

    /// How long this program's load took, part by part: opening and making the maps, the
    /// verifier, and (a program grown with its data written beside the verifier) the fill and
    /// how long it waited for the verifier after.
    pub fn load_timing(&self) -> LoadTiming {
        self.timing
    }

    /// The sizes the zone maps were given at load ([`Capacity`]).
    pub fn capacity(&self) -> Capacity {
        self.cfg.capacity
    }

    /// Install `data` into zone maps of `capacity`, in process and without a moment in which
    /// a packet finds no program or a half-written generation (see the module doc): the
    /// program is loaded again (the verifier runs) with new zone maps of `capacity` and every
    /// other map of ours reused; `data` is installed into it while this program keeps
    /// answering from its own data; then each of our links is switched to it with one
    /// `BPF_LINK_UPDATE`; then it replaces `self`, and the old program and its zone maps go.
    /// On an error nothing has changed: this program and its data keep answering (a link
    /// switched before a later one failed is pointed back at it).
    pub fn install_grown(&mut self, data: &KernelData, capacity: Capacity) -> Result<()> {
        self.install_grown_stream(crate::maps::Stream::of(data), capacity)
    }

    /// [`Self::install_grown`] of the entries of `src`, written as they come.
    pub fn install_grown_stream(&mut self, src: crate::maps::Stream<'_>, capacity: Capacity) -> Result<()> {
        self.install_grown_hooked(src, capacity, None)
    }

    /// [`Self::install_grown_stream`], with `before_verifier` run on the verifier's thread
    /// before it starts (tests: the order of the fill and the verifier).
    #[doc(hidden)]
    pub fn install_grown_hooked(
        &mut self,
        src: crate::maps::Stream<'_>,
        capacity: Capacity,
        before_verifier: Option<Box<dyn FnOnce() + Send>>,
    ) -> Result<()> {
        let cfg = LoadConfig { capacity, ..self.cfg.clone() };
        // the new zone maps are filled while the verifier runs; the new program is attached
        // to nothing yet: no packet reads its maps, whatever state they are in
        let new = Self::load_filled(&cfg, Some(self), src, before_verifier);
        let mut new = new.map_err(|e| if e.is::<crate::maps::Abandoned>() { e } else { e.context("loading the XDP program again with larger zone maps") })?;
        let live = Live {
            gen: libbpf_rs::MapHandle::try_from(&new.skel.maps.xdns_gen).context("duplicating the generation map's fd")?,
            prog_id: new.prog_id()?,
        };
        for (i, (ifname, fd)) in self.links.iter().enumerate() {
            if let Err(e) = update_link(fd.as_fd(), new.skel.progs.xdns_xdp.as_fd()) {
                for (_, back) in &self.links[..i] {
                    let _ = update_link(back.as_fd(), self.skel.progs.xdns_xdp.as_fd());
                }
                return Err(e).with_context(|| format!("switching the XDP link on {ifname} to the program with larger maps"));
            }
        }
        new.links = std::mem::take(&mut self.links);
        new.cache = std::mem::take(&mut self.cache);
        *self.live.write().unwrap_or_else(std::sync::PoisonError::into_inner) = live;
        new.live = self.live.clone();
        // the old program, its zone maps and its generation go (maps still held by the new
        // one stay); packets that were running it finish first (the kernel's RCU)
        drop(std::mem::replace(self, new));
        Ok(())
    }

    /// Update the active generation in place with one zone's change
    /// ([`crate::maps::Loader::apply`]).
    pub fn apply(&mut self, delta: &crate::delta::Delta) -> Result<crate::maps::Applied> {
        let mut maps = LibbpfMaps { zone: &self.zone, abandon: &self.abandon, progress: &self.progress, halves: &self.halves, vals_entries: self.vals_entries };
        self.loader.apply(&mut maps, delta)
    }

    /// Make packets read no generation (each query passes to userspace) and delete the active
    /// one ([`crate::maps::Loader::retire`]).
    pub fn retire(&mut self) -> Result<()> {
        let mut maps = LibbpfMaps { zone: &self.zone, abandon: &self.abandon, progress: &self.progress, halves: &self.halves, vals_entries: self.vals_entries };
        self.loader.retire(&mut maps)
    }

    /// Write `data` as a new generation without activating it, then `commit` it: lets tests
    /// observe the moment of the flip.
    pub fn stage(&mut self, data: &KernelData) -> Result<crate::maps::Staged> {
        let mut maps = self.maps();
        self.loader.stage(&mut maps, data)
    }

    /// Words per half of the presence filter (`xdns_filter`).
    pub fn filter_words(&self) -> usize {
        self.maps().filter_words()
    }

    /// Overwrite generation `gen`'s half of the presence filter. Installs write it; tests use
    /// this to show that the program consults it.
    #[doc(hidden)]
    pub fn put_filter(&mut self, gen: u32, filter: &crate::maps::Filter) -> Result<()> {
        self.maps().put_filter(gen, filter)
    }

    /// Read generation `gen`'s half of the presence filter back (tests).
    #[doc(hidden)]
    pub fn filter(&self, gen: u32) -> Result<crate::maps::Filter> {
        let n = self.filter_words() as u32;
        let map = &self.skel.maps.xdns_filter;
        let words = ((gen & 1) * n..(gen & 1) * n + n)
            .map(|i| {
                let v = map.lookup(&i.to_ne_bytes(), MapFlags::ANY)?.context("filter word missing")?;
                Ok(u64::from_ne_bytes(v[..8].try_into()?))
            })
            .collect::<Result<Vec<u64>>>()?;
        Ok(crate::maps::Filter::from_words(words))
    }

    /// Buckets and record bytes per half of the answer table.
    pub fn table_shape(&self) -> (usize, usize) {
        self.maps().table_shape()
    }

    /// Overwrite generation `gen`'s half of the answer table's index (tests: show that the
    /// program consults it).
    #[doc(hidden)]
    pub fn put_table_index(&mut self, gen: u32, index: &[xdns_bucket]) -> Result<()> {
        self.maps().put_table_index(gen, index)
    }

    /// Sets (of two slots) of each CPU's run of the question memo (`bpf/memo.h`).
    #[doc(hidden)]
    pub fn memo_sets(&self) -> Result<u32> {
        let cpus = libbpf_rs::num_possible_cpus().context("counting possible CPUs")? as u32;
        Ok(self.skel.maps.xdns_memo.max_entries() / cpus / 2)
    }

    /// Rewrite every used slot of the question memo (`bpf/memo.h`), of every CPU, with `f`
    /// (tests: show that the program consults it). Returns how many slots were used.
    #[doc(hidden)]
    pub fn rewrite_memo(&mut self, f: &dyn Fn(&mut crate::types::xdns_memo)) -> Result<usize> {
        let map = &self.skel.maps.xdns_memo;
        let size = std::mem::size_of::<crate::types::xdns_memo>();
        let mut used = 0;
        for slot in 0..map.max_entries() {
            let key = slot.to_ne_bytes();
            let Some(mut v) = map.lookup(&key, MapFlags::ANY)? else { continue };
            // SAFETY: the value is one `xdns_memo` (the map's value type, plain bytes with
            // explicit padding); read unaligned from the byte buffer, written back whole.
            let mut m: crate::types::xdns_memo = unsafe { std::ptr::read_unaligned(v.as_ptr().cast()) };
            if m.hash != 0 {
                f(&mut m);
                v[..size].copy_from_slice(crate::maps::bytes_of(&m));
                map.update(&key, &v, MapFlags::ANY)?;
                used += 1;
            }
        }
        Ok(used)
    }

    /// Delete every entry of the `xdns_answers` hash map (tests: answers must then come from
    /// the answer table). Returns how many there were.
    #[doc(hidden)]
    pub fn clear_answer_map(&mut self) -> Result<usize> {
        clear_map(&self.skel.maps.xdns_answers)
    }

    /// Delete every entry of the `xdns_nodes` hash map (tests: the nodes left out of the
    /// answer table come from there); how many there were.
    #[doc(hidden)]
    pub fn clear_node_map(&mut self) -> Result<usize> {
        clear_map(&self.skel.maps.xdns_nodes)
    }

    pub fn commit(&mut self, staged: crate::maps::Staged) -> Result<()> {
        let mut maps = LibbpfMaps { zone: &self.zone, abandon: &self.abandon, progress: &self.progress, halves: &self.halves, vals_entries: self.vals_entries };
        self.loader.commit(&mut maps, staged)
    }

    /// Attach to interface `ifname` with a BPF link (closed on drop: detached even if the
    /// process dies).
    pub fn attach(&mut self, ifname: &str, mode: AttachMode) -> Result<()> {
        let ifindex = ifindex(ifname)?;
        let flags = match mode {
            AttachMode::Native => libbpf_sys::XDP_FLAGS_DRV_MODE,
            AttachMode::Generic => libbpf_sys::XDP_FLAGS_SKB_MODE,
            AttachMode::Auto => 0,
        };
        // SAFETY: an all-zero `bpf_link_create_opts` is its documented default; `sz` is set.
        let mut opts: libbpf_sys::bpf_link_create_opts = unsafe { std::mem::zeroed() };
        opts.sz = std::mem::size_of::<libbpf_sys::bpf_link_create_opts>() as _;
        opts.flags = flags;
        let prog_fd = self.skel.progs.xdns_xdp.as_fd().as_raw_fd();
        // SAFETY: `prog_fd` is a loaded XDP program owned by `self.skel`, `opts` is initialised
        // and outlives the call.
        let fd = unsafe { libbpf_sys::bpf_link_create(prog_fd, ifindex as i32, libbpf_sys::BPF_XDP, &opts) };
        if fd < 0 {
            bail!("attaching XDP to {ifname} ({mode:?}): {}", std::io::Error::from_raw_os_error(-fd));
        }
        // SAFETY: `fd` is a new link fd returned by the kernel and owned by nobody else.
        self.links.push((ifname.to_string(), unsafe { OwnedFd::from_raw_fd(fd) }));
        Ok(())
    }

    /// Attach to `ifname` again in `mode`: our link there is detached first (the kernel
    /// refuses a second program, and a link cannot change mode), so until the new link is
    /// made the interface runs no program and queries reach the userspace sockets.
    pub fn reattach(&mut self, ifname: &str, mode: AttachMode) -> Result<()> {
        if let Some(i) = self.links.iter().position(|(name, _)| name == ifname) {
            let (_, fd) = self.links.remove(i);
            detach_link(fd.as_fd())?;
        }
        self.attach(ifname, mode)
    }

    /// Detach from every interface.
    pub fn detach_all(&mut self) {
        self.links.clear();
    }

    /// Every verdict counter summed over CPUs, with its name.
    pub fn counters(&self) -> Result<Vec<(String, u64)>> {
        Ok(named_verdicts(verdict_counters(&self.skel.maps.xdns_scratch)?))
    }

    /// Run the program once on `packet` (BPF_PROG_TEST_RUN): `(XDP action, output frame)`.
    pub fn test_run(&self, packet: &[u8]) -> Result<(u32, Vec<u8>)> {
        let mut out = vec![0u8; 4096];
        let input = ProgramInput { data_in: Some(packet), data_out: Some(&mut out), ..Default::default() };
        let res = self.skel.progs.xdns_xdp.test_run(input)?;
        let n = res.data.map_or(0, |d| d.len());
        let ret = res.return_value;
        out.truncate(n);
        Ok((ret, out))
    }

    /// As [`Self::test_run`], the frame received on interface `ifindex` (of the caller's
    /// network namespace; the XDP context's `ingress_ifindex`, queue 0).
    pub fn test_run_on(&self, packet: &[u8], ifindex: u32) -> Result<(u32, Vec<u8>)> {
        let mut out = vec![0u8; 4096];
        // struct xdp_md: data, data_end, data_meta, ingress_ifindex, rx_queue_index, egress_ifindex
        let mut ctx = [0u8; 24];
        ctx[4..8].copy_from_slice(&(packet.len() as u32).to_ne_bytes());
        ctx[12..16].copy_from_slice(&ifindex.to_ne_bytes());
        let input = ProgramInput { data_in: Some(packet), data_out: Some(&mut out), context_in: Some(&mut ctx), ..Default::default() };
        let res = self.skel.progs.xdns_xdp.test_run(input)?;
        let n = res.data.map_or(0, |d| d.len());
        let ret = res.return_value;
        out.truncate(n);
        Ok((ret, out))
    }

    /// Entries in (nodes, answers, bodies S+M+L) of the hash maps, all generations: answers
    /// and class S bodies (inline in their value) of `xdns_answers`, which holds the answers
    /// left out of the answer table only, and the M and L body maps.
    pub fn map_entries(&self) -> (usize, usize, usize) {
        let m = &self.skel.maps;
        let class_at = std::mem::offset_of!(xdns_answer_s, ans) + std::mem::offset_of!(xdns_answer, class);
        let inline_s = m
            .xdns_answers
            .keys()
            .filter_map(|k| m.xdns_answers.lookup(&k, MapFlags::ANY).ok().flatten())
            .filter(|v| v.get(class_at).is_some_and(|&c| u32::from(c) == xdns_body_class::XDNS_CLASS_S.0))
            .count();
        let bodies = inline_s + m.xdns_bodies_m.keys().count() + m.xdns_bodies_l.keys().count();
        (m.xdns_nodes.keys().count(), m.xdns_answers.keys().count(), bodies)
    }

    /// The program's fd, for [`test_run_fd`] from another thread.
    pub fn prog_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.skel.progs.xdns_xdp.as_fd()
    }

    /// Median kernel-measured nanoseconds of `runs` single runs of `packet`. (Repeated runs
    /// inside one BPF_PROG_TEST_RUN reuse the rewritten frame, so after the first the program
    /// would see its own reply; single runs keep every measurement on the real path.)
    pub fn bench(&self, packet: &[u8], runs: u32) -> Result<u64> {
        let mut times = Vec::with_capacity(runs as usize);
        for _ in 0..runs.max(1) {
            let mut out = vec![0u8; 4096];
            let input = ProgramInput { data_in: Some(packet), data_out: Some(&mut out), ..Default::default() };
            let res = self.skel.progs.xdns_xdp.test_run(input)?;
            times.push(res.duration.as_nanos() as u64);
        }
        times.sort_unstable();
        Ok(times[times.len() / 2])
    }

    /// `(translated instructions, instructions the verifier processed)` of the loaded program.
    pub fn insn_count(&self) -> Result<(usize, usize)> {
        let info = self.info()?;
        Ok((info.xlated_prog_len as usize / 8, info.verified_insns as usize))
    }

    /// `(run_cnt, run_time_ns)` of the main program (counted while `kernel.bpf_stats_enabled`
    /// or a `BPF_ENABLE_STATS` fd is held; a tail-called program's time is its caller's).
    pub fn run_stats(&self) -> Result<(u64, u64)> {
        let info = self.info()?;
        Ok((info.run_cnt, info.run_time_ns))
    }

    /// The program's id (as `bpftool prog show` and `ip link` print it).
    pub fn prog_id(&self) -> Result<u32> {
        Ok(self.info()?.id)
    }

    /// How interface `ifname` runs this program (see [`xdp_attached_as`]).
    pub fn attached_as(&self, ifname: &str) -> Result<Option<&'static str>> {
        xdp_attached_as(ifname, self.prog_id()?)
    }

    fn info(&self) -> Result<libbpf_sys::bpf_prog_info> {
        prog_info(self.skel.progs.xdns_xdp.as_fd().as_raw_fd())
    }
}

fn prog_info(fd: std::os::fd::RawFd) -> Result<libbpf_sys::bpf_prog_info> {
    {
        // SAFETY: zeroed `bpf_prog_info` is a valid query buffer; the kernel fills at most
        // `len` bytes of it for the program `fd` we own.
        let mut info: libbpf_sys::bpf_prog_info = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libbpf_sys::bpf_prog_info>() as u32;
        // SAFETY: as above; `info` and `len` are valid for writes.
        let rc = unsafe { libbpf_sys::bpf_prog_get_info_by_fd(fd, &mut info, &mut len) };
        if rc != 0 {
            bail!("bpf_prog_get_info_by_fd: {rc}");
        }
        Ok(info)
    }
}

/// The zone maps ([`ZONE_MAPS`] but the program arrays) of one object, on duplicates of
/// their fds, with the sizes the object's read-only data gives them: what the loader writes.
/// Made once the object's maps exist (`bpf_object__prepare`), before the verifier has run:
/// nothing here depends on the loaded program, so the maps can be filled on one thread while
/// another runs the verifier ([`XdpProgram::install_grown_stream`]).
struct ZoneMaps {
    gen: libbpf_rs::MapHandle,
    filter: libbpf_rs::MapHandle,
    index: libbpf_rs::MapHandle,
    vals: libbpf_rs::MapHandle,
    nodes: libbpf_rs::MapHandle,
    answers: libbpf_rs::MapHandle,
    bodies_m: libbpf_rs::MapHandle,
    bodies_l: libbpf_rs::MapHandle,
    /// Words per half of the presence filter (`xdns_cfg.filter_mask + 1`).
    filter_words: usize,
    /// Buckets and record bytes per half of the answer table (`xdns_cfg.table_buckets`,
    /// `xdns_cfg.val_pages` pages).
    table: (usize, usize),
}

impl ZoneMaps {
    /// The zone maps of `obj`, whose maps exist (prepared or loaded), sized by `c` (the
    /// capacity its read-only data was given).
    fn of(obj: &libbpf_rs::OpenObject, c: &Capacity) -> Result<Self> {
        use libbpf_rs::AsRawLibbpf as _;
        let handle = |name: &str| -> Result<libbpf_rs::MapHandle> {
            let m = obj
                .maps()
                .find(|m| m.name().to_str() == Some(name))
                .with_context(|| format!("the XDP object has no map {name}"))?;
            // SAFETY: the pointer is the object's own `bpf_map`, valid while `obj` is borrowed;
            // its fd exists (the object's maps were made), which `Map::new` checks.
            let map = libbpf_rs::Map::new(unsafe { m.as_libbpf_object().as_ref() });
            libbpf_rs::MapHandle::try_from(&map).with_context(|| format!("duplicating the fd of map {name}"))
        };
        Ok(Self {
            gen: handle("xdns_gen")?,
            filter: handle("xdns_filter")?,
            index: handle("xdns_index")?,
            vals: handle("xdns_vals")?,
            nodes: handle("xdns_nodes")?,
            answers: handle("xdns_answers")?,
            bodies_m: handle("xdns_bodies_m")?,
            bodies_l: handle("xdns_bodies_l")?,
            filter_words: c.filter_words(),
            table: (c.table_buckets(), c.table_pages() * crate::data::PAGE),
        })
    }
}

/// [`KernelMaps`] over the real zone maps of one object (loaded, or only prepared: the
/// verifier may be running on another thread).
struct LibbpfMaps<'a> {
    zone: &'a ZoneMaps,
    /// [`XdpProgram::abandon_handle`].
    abandon: &'a AtomicBool,
    /// [`XdpProgram::fill_progress`].
    progress: &'a crate::maps::FillProgress,
    /// [`XdpProgram::vals`].
    halves: &'a std::sync::Mutex<[Option<TableHalf>; 2]>,
    vals_entries: u32,
}

impl KernelMaps for LibbpfMaps<'_> {
    fn abandoned(&self) -> bool {
        self.abandon.load(Ordering::Relaxed)
    }

    fn progress(&self, written: usize, total: usize) {
        self.progress.set(written, total);
    }

    fn put_node(&mut self, key: &xdns_node_key, node: &xdns_node) -> Result<()> {
        self.zone.nodes.update(bytes_of(key), bytes_of(node), MapFlags::ANY)?;
        Ok(())
    }

    fn delete_node(&mut self, key: &xdns_node_key) -> Result<()> {
        self.zone.nodes.delete(bytes_of(key))?;
        Ok(())
    }

    fn put_body(&mut self, key: &xdns_answer_key, answer: &xdns_answer, body: &BodyValue) -> Result<()> {
        let k = bytes_of(key);
        let bk = crate::maps::body_key(key, answer);
        let m = self.zone;
        match body {
            BodyValue::M(b) => m.bodies_m.update(bytes_of(&bk), bytes_of(&**b), MapFlags::ANY)?,
            BodyValue::L(b) => m.bodies_l.update(bytes_of(&bk), bytes_of(&**b), MapFlags::ANY)?,
            BodyValue::S { .. } | BodyValue::Userspace => {}
        }
        m.answers.update(k, bytes_of(&*answer_value(answer, body)), MapFlags::ANY)?;
        Ok(())
    }

    fn delete_body(&mut self, key: &xdns_answer_key, class: u8) -> Result<()> {
        let k = bytes_of(key);
        let m = self.zone;
        m.answers.delete(bytes_of(&crate::maps::answer_key_of(key)))?;
        match xdns_body_class(u32::from(class)) {
            xdns_body_class::XDNS_CLASS_M => m.bodies_m.delete(k)?,
            xdns_body_class::XDNS_CLASS_L => m.bodies_l.delete(k)?,
            _ => {}
        }
        Ok(())
    }

    fn put_nodes(&mut self, entries: &[(xdns_node_key, xdns_node)]) -> Result<()> {
        for chunk in entries.chunks(BATCH) {
            let (k, v) = flatten(chunk.iter().map(|(k, v)| (bytes_of(k), bytes_of(v))));
            self.zone.nodes.update_batch(&k, &v, chunk.len() as u32, MapFlags::ANY, MapFlags::ANY)?;
        }
        Ok(())
    }

    fn put_bodies(&mut self, entries: &[(xdns_answer_key, xdns_answer, BodyValue)]) -> Result<()> {
        let m = self.zone;
        for chunk in entries.chunks(BATCH) {
            // body bytes before the answer entries that point at them
            self.put_table_bodies(chunk)?;
            let values: Vec<Box<xdns_answer_s>> = chunk.iter().map(|(_, a, b)| answer_value(a, b)).collect();
            batch_update(&m.answers, chunk.iter().zip(&values).map(|((k, _, _), v)| (bytes_of(k), bytes_of(&**v))))?;
        }
        Ok(())
    }

    fn delete_nodes(&mut self, keys: &[xdns_node_key]) {
        batch_delete(&self.zone.nodes, keys.iter().map(bytes_of));
    }

    fn delete_bodies(&mut self, keys: &[(xdns_answer_key, u8)]) {
        let answers: Vec<xdns_answer_key> = keys.iter().map(|(k, _)| crate::maps::answer_key_of(k)).collect();
        batch_delete(&self.zone.answers, answers.iter().map(bytes_of));
        self.delete_table_bodies(0, keys);
    }

    fn delete_body_bytes(&mut self, keys: &[(xdns_answer_key, u8)]) {
        self.delete_table_bodies(0, keys);
    }

    fn put_table_bodies(&mut self, entries: &[(xdns_answer_key, xdns_answer, BodyValue)]) -> Result<()> {
        // the header and the class S bytes go to the table's value (put_table_values): no
        // copy in xdns_answers, which the kernel asks only for keys the table lacks; so do
        // the class M bytes of a table record (body_ver BODY_INLINE). (`put_bodies` comes
        // here too, for answers outside the table: their M bytes go to the map.)
        let m = self.zone;
        for chunk in entries.chunks(BATCH) {
            // under each answer's body_ver (bpf/xdns_abi.h)
            let keys: Vec<xdns_answer_key> = chunk.iter().map(|(k, a, _)| crate::maps::body_key(k, a)).collect();
            let mm = chunk.iter().zip(&keys).filter_map(|((_, a, b), k)| match b {
                BodyValue::M(b) if a.body_ver != crate::data::BODY_INLINE => Some((bytes_of(k), bytes_of(&**b))),
                _ => None,
            });
            batch_update(&m.bodies_m, mm)?;
            let l = chunk.iter().zip(&keys).filter_map(|((_, _, b), k)| match b {
                BodyValue::L(b) => Some((bytes_of(k), bytes_of(&**b))),
                _ => None,
            });
            batch_update(&m.bodies_l, l)?;
        }
        Ok(())
    }

    fn delete_table_bodies(&mut self, _gen: u32, keys: &[(xdns_answer_key, u8)]) {
        let m = self.zone;
        for (class, map) in [
            (xdns_body_class::XDNS_CLASS_M, &m.bodies_m),
            (xdns_body_class::XDNS_CLASS_L, &m.bodies_l),
        ] {
            let ks = keys.iter().filter(|(_, c)| u32::from(*c) == class.0).map(|(k, _)| bytes_of(k));
            batch_delete(map, ks);
        }
    }

    fn filter_words(&self) -> usize {
        self.zone.filter_words
    }

    fn put_filter(&mut self, gen: u32, filter: &crate::maps::Filter) -> Result<()> {
        let words = filter.words();
        if words.len() != self.filter_words() {
            bail!("presence filter of {} words for a map half of {}", words.len(), self.filter_words());
        }
        // written whole through a window of the (mmapable) map, a window's worth at a time:
        // word `i` of the half is array value (gen & 1) * words + i, eight bytes each
        let base = (gen & 1) as usize * words.len() * 8;
        let mut window = crate::window::ArrayWindow::new(self.zone.filter.as_fd(), 2 * words.len(), 8)?;
        for (n, chunk) in words.chunks(crate::window::WINDOW / 8).enumerate() {
            let dst = window.bytes(base + n * crate::window::WINDOW, chunk.len() * 8)?;
            for (d, w) in dst.chunks_exact_mut(8).zip(chunk) {
                d.copy_from_slice(&w.to_ne_bytes());
            }
        }
        // every word stored before the flip that makes the half active
        std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
        Ok(())
    }

    fn table_shape(&self) -> (usize, usize) {
        self.zone.table
    }

    fn new_table_half(&mut self, gen: u32) -> Result<()> {
        let half = gen & 1;
        let pages = new_val_pages(self.vals_entries).context("creating a generation's answer table pages")?;
        let index = new_index(self.table_shape().0 as u32).context("creating a generation's answer table index")?;
        // the page array is held by its window's fd from here on
        let window = crate::window::ArrayWindow::new(pages.as_fd(), self.vals_entries as usize, PAGE_VALUE)?;
        let m = self.zone;
        m.vals.update(&half.to_ne_bytes(), &pages.as_fd().as_raw_fd().to_ne_bytes(), MapFlags::ANY).context("setting a generation's answer table pages")?;
        m.index.update(&half.to_ne_bytes(), &index.as_fd().as_raw_fd().to_ne_bytes(), MapFlags::ANY).context("setting a generation's answer table index")?;
        self.halves.lock().unwrap_or_else(std::sync::PoisonError::into_inner)[half as usize] = Some(TableHalf { pages: window, index });
        Ok(())
    }

    fn free_table_half(&mut self, gen: u32) {
        let half = gen & 1;
        // the kernel waits for programs running meanwhile before it returns (map-in-map
        // deletes), then frees the array once our handle is closed too
        let _ = self.zone.index.delete(&half.to_ne_bytes());
        let _ = self.zone.vals.delete(&half.to_ne_bytes());
        self.halves.lock().unwrap_or_else(std::sync::PoisonError::into_inner)[half as usize] = None;
    }

    fn put_table_values(&mut self, gen: u32, values: &[(u32, &xdns_answer, &BodyValue)]) -> Result<()> {
        use crate::data::{record_len, write_record};
        // each record written in place through the mapped window of the page array
        let (_, half_bytes) = self.table_shape();
        let mut halves = self.halves.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let half = halves[(gen & 1) as usize].as_mut().context("no answer table for this generation")?;
        for (addr, a, b) in values {
            write_record(record_bytes(&mut half.pages, half_bytes, *addr, record_len(a, b))?, a, b);
        }
        Ok(())
    }

    fn put_table_nodes(&mut self, gen: u32, nodes: &[(u32, xdns_node_key, xdns_node)]) -> Result<()> {
        // as `put_table_values`: each record in place through the page array's window
        let (_, half_bytes) = self.table_shape();
        let mut halves = self.halves.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let half = halves[(gen & 1) as usize].as_mut().context("no answer table for this generation")?;
        for (addr, _, n) in nodes {
            record_bytes(&mut half.pages, half_bytes, *addr, NODE_RECORD)?.copy_from_slice(bytes_of(n));
        }
        Ok(())
    }

    fn put_table_index(&mut self, gen: u32, index: &[xdns_bucket]) -> Result<()> {
        let (buckets, _) = self.table_shape();
        if index.len() != buckets {
            bail!("answer table index of {} buckets for a map half of {buckets}", index.len());
        }
        let mut halves = self.halves.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let half = halves[(gen & 1) as usize].as_mut().context("no answer table for this generation")?;
        // the last write of the half's fill: its pages' window goes
        half.pages.unmap();
        // SAFETY: `xdns_bucket` is plain integers without padding (the ABI's explicit layout,
        // a multiple of 8 bytes: the array's stride); the slice covers exactly `index`.
        let raw = unsafe { std::slice::from_raw_parts(index.as_ptr().cast::<u8>(), std::mem::size_of_val(index)) };
        let size = std::mem::size_of::<xdns_bucket>();
        crate::window::ArrayWindow::new(half.index.as_fd(), buckets, size)?.write(0, raw)?;
        // every store of the half (pages, index) before the flip that makes it active
        std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
        Ok(())
    }

    fn put_table_bucket(&mut self, gen: u32, bucket: usize, value: &xdns_bucket) -> Result<()> {
        let (buckets, _) = self.table_shape();
        if bucket >= buckets {
            bail!("answer table bucket {bucket} outside a map half of {buckets}");
        }
        let halves = self.halves.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let map = &halves[(gen & 1) as usize].as_ref().context("no answer table for this generation")?.index;
        // the records this bucket names were stored through the mapping (plain stores): they
        // are visible before the bucket that publishes them, on any CPU's memory order
        std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
        map.update(&(bucket as u32).to_ne_bytes(), bytes_of(value), MapFlags::ANY)?;
        Ok(())
    }

    fn table_bucket(&self, gen: u32, bucket: usize) -> Result<xdns_bucket> {
        let (buckets, _) = self.table_shape();
        if bucket >= buckets {
            bail!("answer table bucket {bucket} outside a map half of {buckets}");
        }
        let halves = self.halves.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let map = &halves[(gen & 1) as usize].as_ref().context("no answer table for this generation")?.index;
        let v = map.lookup(&(bucket as u32).to_ne_bytes(), MapFlags::ANY)?.context("answer table bucket missing")?;
        if v.len() < std::mem::size_of::<xdns_bucket>() {
            bail!("answer table bucket of {} bytes", v.len());
        }
        // SAFETY: the value is one `xdns_bucket` (the map's value type: plain integers, no
        // padding), read unaligned from a buffer at least that long (checked above).
        Ok(unsafe { std::ptr::read_unaligned(v.as_ptr().cast()) })
    }

    fn filter_word(&self, gen: u32, word: usize) -> Result<u64> {
        let n = self.filter_words();
        if word >= n {
            bail!("presence filter word {word} outside a map half of {n}");
        }
        let key = ((gen & 1) * n as u32 + word as u32).to_ne_bytes();
        let v = self.zone.filter.lookup(&key, MapFlags::ANY)?.context("presence filter word missing")?;
        Ok(u64::from_ne_bytes(v.get(..8).context("presence filter word of fewer than 8 bytes")?.try_into()?))
    }

    fn put_filter_words(&mut self, gen: u32, words: &[(usize, u64)]) -> Result<()> {
        let n = self.filter_words();
        for &(i, w) in words {
            if i >= n {
                bail!("presence filter word {i} outside a map half of {n}");
            }
            let key = ((gen & 1) * n as u32 + i as u32).to_ne_bytes();
            self.zone.filter.update(&key, &w.to_ne_bytes(), MapFlags::ANY)?;
        }
        Ok(())
    }

    fn set_memo_epoch(&mut self, epoch: u32) -> Result<()> {
        self.zone.gen.update(&2u32.to_ne_bytes(), &epoch.to_ne_bytes(), MapFlags::ANY)?;
        Ok(())
    }

    fn flip_generation(&mut self, gen: u32) -> Result<()> {
        self.zone.gen.update(&0u32.to_ne_bytes(), &gen.to_ne_bytes(), MapFlags::ANY)?;
        Ok(())
    }

    fn set_label_floor(&mut self, floor: u32) -> Result<()> {
        self.zone.gen.update(&1u32.to_ne_bytes(), &floor.to_ne_bytes(), MapFlags::ANY)?;
        Ok(())
    }

    fn active_generation(&self) -> Result<u32> {
        read_generation(&self.zone.gen)
    }
}

/// The counters, the active generation and how interfaces run the program, read through
/// duplicates of the maps' fds and by program id: from any thread, while the program's owner
/// is busy (filling or reloading the maps) or not.
/// The reads take no lock: each counter is a CPU's own u64, the generation one u32 the loader
/// flips when a new generation is complete.
pub struct StatusReader {
    scratch: libbpf_rs::MapHandle,
    /// The generation map and program id of the program running now (replaced when the zone
    /// maps grow: [`XdpProgram::install_grown`]).
    live: Arc<std::sync::RwLock<Live>>,
    /// The guard stage is compiled in.
    guard: bool,
}

impl StatusReader {
    /// Every verdict counter summed over CPUs, by name (as [`XdpProgram::counters`]).
    pub fn counters(&self) -> Result<Vec<(String, u64)>> {
        Ok(named_verdicts(verdict_counters(&self.scratch)?))
    }

    /// The question memo's counters (as [`XdpProgram::memo_counts`]).
    pub fn memo_counts(&self) -> Result<(u64, u64)> {
        memo_counters(&self.scratch)
    }

    /// The reply memo's counters (as [`XdpProgram::reply_counts`]).
    pub fn reply_counts(&self) -> Result<(u64, u64)> {
        reply_counters(&self.scratch)
    }

    /// The guard stage's counters (as [`crate::guard::Guard::counters`]); `None` when the
    /// program was loaded without the stage.
    pub fn guard_counters(&self) -> Result<Option<crate::guard::GuardCounters>> {
        if !self.guard {
            return Ok(None);
        }
        crate::guard::counters_of(&self.scratch, crate::guard::TIER_SLOTS).map(Some)
    }

    /// The generation packets read (`xdns_gen[0]`; 0 until the first install completes).
    pub fn generation(&self) -> Result<u32> {
        read_generation(&self.live.read().unwrap_or_else(std::sync::PoisonError::into_inner).gen)
    }

    /// How interface `ifname` runs the program, asked of the kernel now
    /// ([`xdp_attached_as`]).
    pub fn attached_as(&self, ifname: &str) -> Result<Option<&'static str>> {
        let id = self.live.read().unwrap_or_else(std::sync::PoisonError::into_inner).prog_id;
        xdp_attached_as(ifname, id)
    }
}

/// How interface `ifname` runs program `prog_id`, asked of the kernel (`bpf_xdp_query`, a
/// netlink request): "native" (in the driver), "generic" (on the skb path, after the
/// kernel allocated a socket buffer: several times slower) or "offload" (on the NIC). This is
/// what `mode = "auto"` chose. `None` when the interface runs another program or none (a
/// takeover handed the link to a new process, or the link was detached).
pub fn xdp_attached_as(ifname: &str, prog_id: u32) -> Result<Option<&'static str>> {
    let index = ifindex(ifname)?;
    // SAFETY: an all-zero `bpf_xdp_query_opts` is its documented default; `sz` is set.
    let mut opts: libbpf_sys::bpf_xdp_query_opts = unsafe { std::mem::zeroed() };
    opts.sz = std::mem::size_of::<libbpf_sys::bpf_xdp_query_opts>() as _;
    // SAFETY: `opts` is initialised, sized, and valid for writes during the call.
    let rc = unsafe { libbpf_sys::bpf_xdp_query(index as i32, 0, &mut opts) };
    if rc != 0 {
        bail!("querying XDP on {ifname}: {}", std::io::Error::from_raw_os_error(-rc));
    }
    Ok(match prog_id {
        0 => None,
        id if opts.drv_prog_id == id => Some("native"),
        id if opts.skb_prog_id == id => Some("generic"),
        id if opts.hw_prog_id == id => Some("offload"),
        _ => None,
    })
}

/// `xdns_gen[0]`: the generation packets read.
fn read_generation(gen: &impl MapCore) -> Result<u32> {
    let v = gen.lookup(&0u32.to_ne_bytes(), MapFlags::ANY)?;
    let v = v.context("xdns_gen[0] missing")?;
    Ok(u32::from_ne_bytes(v.get(..4).context("xdns_gen value shorter than 4 bytes")?.try_into()?))
}

/// Each CPU's scratch value (one per CPU), for the counters at its end.
fn scratch_values(scratch: &impl MapCore) -> Result<Vec<Vec<u8>>> {
    Ok(scratch.lookup_percpu(&0u32.to_ne_bytes(), MapFlags::ANY)?.unwrap_or_default())
}

/// The verdict counters (`bpf/stats.h`: `verdicts` in each CPU's scratch value), summed,
/// indexed by `enum xdns_verdict`.
fn verdict_counters(scratch: &impl MapCore) -> Result<Vec<u64>> {
    use crate::types::xdns_scratch;
    let n = crate::VERDICT_NAMES.len();
    let at = std::mem::offset_of!(xdns_scratch, verdicts);
    let mut out = vec![0u64; n];
    for cpu in &scratch_values(scratch)? {
        for (i, slot) in out.iter_mut().enumerate() {
            let b = cpu.get(at + 8 * i..at + 8 * i + 8).context("scratch value shorter than its counters")?;
            *slot += u64::from_ne_bytes(b.try_into()?);
        }
    }
    Ok(out)
}

/// Counters indexed by verdict, named (`answered`, `pass_<reason>`, ...).
fn named_verdicts(v: Vec<u64>) -> Vec<(String, u64)> {
    v.into_iter()
        .enumerate()
        .filter_map(|(i, n)| Some((crate::verdict_name(i)?, n)))
        .collect()
}

/// The memo's hit and kept counters summed over CPUs (`memo_hits`, `memo_kept` in scratch).
fn memo_counters(scratch: &impl MapCore) -> Result<(u64, u64)> {
    use crate::types::xdns_scratch;
    scratch_pair(scratch, std::mem::offset_of!(xdns_scratch, memo_hits), std::mem::offset_of!(xdns_scratch, memo_kept))
}

/// The reply memo's hit and kept counters summed over CPUs (`reply_hits`, `reply_kept`).
fn reply_counters(scratch: &impl MapCore) -> Result<(u64, u64)> {
    use crate::types::xdns_scratch;
    scratch_pair(scratch, std::mem::offset_of!(xdns_scratch, reply_hits), std::mem::offset_of!(xdns_scratch, reply_kept))
}

/// Two u64 counters of the scratch value (at byte offsets `a` and `b`), summed over CPUs.
fn scratch_pair(scratch: &impl MapCore, a: usize, b: usize) -> Result<(u64, u64)> {
    let field = |v: &[u8], at: usize| v.get(at..at + 8).map_or(0, |w| u64::from_ne_bytes(w.try_into().unwrap_or([0; 8])));
    Ok(scratch_values(scratch)?.iter().fold((0, 0), |(x, y), v| (x + field(v, a), y + field(v, b))))
}

/// BPF_PROG_TEST_RUN on a program fd: `(XDP action, output frame)`. Usable from any thread
/// (the kernel serialises nothing here; map updates may run concurrently).
pub fn test_run_fd(fd: std::os::fd::BorrowedFd<'_>, packet: &[u8]) -> Result<(u32, Vec<u8>)> {
    let mut out = vec![0u8; 4096];
    // SAFETY: a zeroed `bpf_test_run_opts` is the documented default; `sz` is set below.
    let mut opts: libbpf_sys::bpf_test_run_opts = unsafe { std::mem::zeroed() };
    opts.sz = std::mem::size_of::<libbpf_sys::bpf_test_run_opts>() as _;
    opts.data_in = packet.as_ptr().cast();
    opts.data_size_in = packet.len() as u32;
    opts.data_out = out.as_mut_ptr().cast();
    opts.data_size_out = out.len() as u32;
    // SAFETY: `fd` is a valid program fd for the call; `data_in`/`data_out` point to live
    // buffers of the sizes given, which outlive the call.
    let rc = unsafe { libbpf_sys::bpf_prog_test_run_opts(fd.as_raw_fd(), &mut opts) };
    if rc != 0 {
        bail!("bpf_prog_test_run_opts: {}", std::io::Error::last_os_error());
    }
    out.truncate(opts.data_size_out as usize);
    Ok((opts.retval, out))
}

/// Entries per batch syscall.
const BATCH: usize = 4096;

/// Concatenated keys and values of a batch.
fn flatten<'a>(it: impl Iterator<Item = (&'a [u8], &'a [u8])>) -> (Vec<u8>, Vec<u8>) {
    let (mut ks, mut vs) = (Vec::new(), Vec::new());
    for (k, v) in it {
        ks.extend_from_slice(k);
        vs.extend_from_slice(v);
    }
    (ks, vs)
}

/// The bytes of one value of an answer table page array (`xdns_vals`): a page and its slack,
/// a multiple of 8 (so also the array's stride).
const PAGE_VALUE: usize = crate::data::PAGE + crate::data::PAGE_SLACK;
const _: () = assert!(PAGE_VALUE.is_multiple_of(8) && std::mem::size_of::<xdns_bucket>().is_multiple_of(8));

/// Creation options of the answer table's inner arrays: mmapable, so that the fill writes
/// them through a mapping (templates and per-generation arrays alike: the outer map checks
/// that an inner map's flags are its template's).
/// The `len` bytes of the record at address `addr` (bytes / 4) of a table half of
/// `half_bytes` bytes, through the window of its page array: page `p` is array value `p`,
/// whose bytes start at `p` * PAGE_VALUE in the value area; a record runs at most into its
/// page's slack.
fn record_bytes(pages: &mut crate::window::ArrayWindow, half_bytes: usize, addr: u32, len: usize) -> Result<&mut [u8]> {
    use crate::data::{PAGE, PAGE_SLACK};
    let at = 4 * addr as usize;
    let (page, off) = (at / PAGE, at % PAGE);
    if at + len > half_bytes || off + len > PAGE + PAGE_SLACK {
        bail!("table record at {addr} of {len} bytes outside a table half of {half_bytes}");
    }
    pages.bytes(page * PAGE_VALUE + off, len)
}

/// Delete every entry of a hash map; how many there were.
fn clear_map(map: &impl libbpf_rs::MapCore) -> Result<usize> {
    let keys: Vec<Vec<u8>> = map.keys().collect();
    for k in &keys {
        map.delete(k)?;
    }
    Ok(keys.len())
}

fn table_map_opts() -> libbpf_sys::bpf_map_create_opts {
    libbpf_sys::bpf_map_create_opts {
        sz: std::mem::size_of::<libbpf_sys::bpf_map_create_opts>() as _,
        map_flags: libbpf_sys::BPF_F_MMAPABLE,
        ..Default::default()
    }
}

/// An answer table index of `buckets` buckets (`xdns_index`, maps.h), empty.
fn new_index(buckets: u32) -> Result<libbpf_rs::MapHandle> {
    let opts = table_map_opts();
    let size = std::mem::size_of::<xdns_bucket>() as u32;
    Ok(libbpf_rs::MapHandle::create(libbpf_rs::MapType::Array, Some("xdns_index_gen"), 4, size, buckets.max(1), &opts)?)
}

/// An answer table page array of `entries` pages (`xdns_vals`, maps.h), zeroed.
fn new_val_pages(entries: u32) -> Result<libbpf_rs::MapHandle> {
    let opts = table_map_opts();
    let size = PAGE_VALUE as u32;
    Ok(libbpf_rs::MapHandle::create(libbpf_rs::MapType::Array, Some("xdns_vals_gen"), 4, size, entries, &opts)?)
}

/// One BPF_MAP_UPDATE_BATCH for the entries (none: no call).
fn batch_update<'a, M: MapCore + ?Sized>(map: &M, it: impl Iterator<Item = (&'a [u8], &'a [u8])>) -> Result<()> {
    let (k, v) = flatten(it);
    let n = k.len() / map.key_size() as usize;
    if n > 0 {
        map.update_batch(&k, &v, n as u32, MapFlags::ANY, MapFlags::ANY)?;
    }
    Ok(())
}

/// BPF_MAP_DELETE_BATCH in chunks; a chunk that fails (a key already gone) is retried key by
/// key, ignoring missing keys.
fn batch_delete<'a, M: MapCore + ?Sized>(map: &M, keys: impl Iterator<Item = &'a [u8]>) {
    let all: Vec<&[u8]> = keys.collect();
    for chunk in all.chunks(BATCH) {
        let k: Vec<u8> = chunk.concat();
        if map.delete_batch(&k, chunk.len() as u32, MapFlags::ANY, MapFlags::ANY).is_err() {
            for key in chunk {
                let _ = map.delete(key);
            }
        }
    }
}

/// Link hand-over for a restart without a gap (`xdns serve --takeover`): the running process
/// passes duplicates of its link fds to the new one, which points each link at its own
/// program with one `BPF_LINK_UPDATE` (the kernel swaps the program atomically: every packet
/// runs either the old or the new program, none finds the interface bare).
impl XdpProgram {
    /// Duplicates of the link fds, with their interface names, to hand to a new process.
    /// A link lives while any process holds a fd to it; closing ours later detaches nothing.
    pub fn link_fds(&self) -> Result<Vec<(String, OwnedFd)>> {
        self.links
            .iter()
            .map(|(name, fd)| Ok((name.clone(), fd.try_clone().context("duplicating a link fd")?)))
            .collect()
    }

    /// Take over `link`, an XDP link on `ifname` made by another process: checked to be an
    /// XDP link on that interface, then switched to this program atomically and kept like a
    /// link of our own (closed on drop; the link dies with its last fd).
    pub fn adopt_link(&mut self, ifname: &str, link: OwnedFd) -> Result<()> {
        let want = ifindex(ifname)?;
        let (kind, ifindex) = link_info(link.as_fd())?;
        if kind != libbpf_sys::BPF_LINK_TYPE_XDP || ifindex != want {
            bail!("the link handed over for {ifname} is not an XDP link on it (type {kind}, ifindex {ifindex})");
        }
        update_link(link.as_fd(), self.skel.progs.xdns_xdp.as_fd()).with_context(|| format!("replacing the XDP program on {ifname}"))?;
        self.links.push((ifname.to_string(), link));
        Ok(())
    }

    /// Point every link of ours at our program again: a hand-over that was abandoned after
    /// the new process switched some links to its program gives them back.
    pub fn reclaim_links(&self) -> Result<()> {
        for (ifname, fd) in &self.links {
            update_link(fd.as_fd(), self.skel.progs.xdns_xdp.as_fd()).with_context(|| format!("reclaiming the XDP link on {ifname}"))?;
        }
        Ok(())
    }
}

/// Detach an XDP link now, whoever else holds a fd to it (`BPF_LINK_DETACH`): needed before
/// attaching in another mode, which the kernel refuses while a program of either mode is on.
pub fn detach_link(link: std::os::fd::BorrowedFd<'_>) -> Result<()> {
    // SAFETY: `link` is a valid fd for the duration of the call.
    let rc = unsafe { libbpf_sys::bpf_link_detach(link.as_raw_fd()) };
    if rc < 0 {
        bail!("detaching an XDP link: {}", std::io::Error::from_raw_os_error(-rc));
    }
    Ok(())
}

/// `(link type, XDP ifindex)` of a link fd (the ifindex means something only for XDP links).
pub fn link_info(link: std::os::fd::BorrowedFd<'_>) -> Result<(u32, u32)> {
    // SAFETY: a zeroed `bpf_link_info` is a valid query buffer; the kernel fills at most `len`
    // bytes of it.
    let mut info: libbpf_sys::bpf_link_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libbpf_sys::bpf_link_info>() as u32;
    // SAFETY: `link` is a valid fd; `info` and `len` are valid for writes during the call.
    let rc = unsafe { libbpf_sys::bpf_link_get_info_by_fd(link.as_raw_fd(), &mut info, &mut len) };
    if rc < 0 {
        bail!("reading a BPF link's info: {}", std::io::Error::from_raw_os_error(-rc));
    }
    // SAFETY: every variant of the union is plain integers; `xdp.ifindex` is what the kernel
    // wrote for an XDP link and meaningless (but initialised) otherwise.
    let ifindex = unsafe { info.__bindgen_anon_1.xdp.ifindex };
    Ok((info.type_, ifindex))
}

/// Replace the program inside `link` with `prog` (one atomic `BPF_LINK_UPDATE`).
fn update_link(link: std::os::fd::BorrowedFd<'_>, prog: std::os::fd::BorrowedFd<'_>) -> Result<()> {
    // SAFETY: an all-zero `bpf_link_update_opts` is its documented default; `sz` is set.
    let mut opts: libbpf_sys::bpf_link_update_opts = unsafe { std::mem::zeroed() };
    opts.sz = std::mem::size_of::<libbpf_sys::bpf_link_update_opts>() as _;
    // SAFETY: both fds are valid for the call; `opts` is initialised and outlives it.
    let rc = unsafe { libbpf_sys::bpf_link_update(link.as_raw_fd(), prog.as_raw_fd(), &opts) };
    if rc < 0 {
        bail!("BPF_LINK_UPDATE: {}", std::io::Error::from_raw_os_error(-rc));
    }
    Ok(())
}

/// The index of interface `ifname`.
fn ifindex(ifname: &str) -> Result<u32> {
    let cname = CString::new(ifname)?;
    // SAFETY: `cname` is a valid NUL-terminated string for the duration of the call.
    let i = unsafe { libc::if_nametoindex(cname.as_ptr()) };
    if i == 0 {
        bail!("no interface {ifname}");
    }
    Ok(i)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::{AnswerEntry, Kind, NodeEntry};

    /// `n` names under one apex, each with a 4-byte A answer (class S).
    fn data(n: usize) -> KernelData {
        let apex = b"\x07example\x03com\x00".to_vec();
        let mut d = KernelData::default();
        for i in 0..n {
            let mut name = vec![];
            let label = format!("h{i}");
            name.push(label.len() as u8);
            name.extend_from_slice(label.as_bytes());
            name.extend_from_slice(&apex);
            let mut w = xdns_wire::body::BodyWriter::new(&name).unwrap();
            w.write_rr(&name, true, 1, 300, &[198, 18, 0, 1]).unwrap();
            d.nodes.push(NodeEntry { name: name.clone(), apex: apex.clone(), cut: None, wildcard: false });
            d.answers.push(AnswerEntry { base: name, kind: Kind::Type(1), body: w.finish() });
        }
        d
    }

    #[test]
    fn empty_start_does_not_hold_a_transferred_zone() {
        let empty = Capacity::for_data(&KernelData::default());
        assert!(empty.holds(&Capacity::for_data(&data(100))), "small zones fit the smallest maps");
        let big = Capacity::for_data(&data(50_000));
        assert!(!empty.holds(&big));
        // grown maps get the start-up sizing of the new data: its answers and nodes and an
        // eighth more in the table, a quarter of them in the hash maps (the nodes' at least
        // twice what one in-place update may change)
        let grown = empty.max(&big);
        assert_eq!(grown.nodes, 50_000 / 4);
        assert_eq!(grown.answers, 50_000 / 4);
        assert_eq!(grown.table_keys(), 100_000 + 100_000 / 8);
        assert!(grown.holds(&big) && grown.holds(&empty));
        assert_eq!(grown.table_buckets(), big.table_buckets());
        assert_eq!(grown.table_bytes(), big.table_bytes());
    }

    /// `xdns_bodies_m` holds only class M bodies outside the answer table: a quarter of them
    /// (left out), but room twice over for those of the names one in-place update may change
    /// (a small signed zone changes all of them, again and again: `test_signed_ixfr_in_place`
    /// ran out of a quarter), and twice what the table cannot hold at all.
    #[test]
    fn class_m_body_room() {
        let shape = |nodes: usize, class_m: usize, answers: usize, record_bytes: u64| crate::data::Shape { nodes, answers, class_m, class_l: 0, record_bytes };
        // small: every class M body changed in place, two versions at once
        assert_eq!(Capacity::for_shape(&shape(2_000, 3_000, 6_000, 1 << 20)).bodies_m, 6_000);
        // large: a quarter, or twice three bodies of an eighth of the names, whichever is more
        assert_eq!(Capacity::for_shape(&shape(5_400_000, 6_800_000, 13_600_000, 3 << 30)).bodies_m, 2 * 3 * 675_000);
        assert_eq!(Capacity::for_shape(&shape(100_000, 8_000_000, 9_000_000, 3 << 30)).bodies_m, 2_000_000);
        // past the table's largest size, the share of class M bodies it cannot hold, twice
        let over = Capacity::for_shape(&shape(100_000, 8_000_000, 9_000_000, 2 * TABLE_MAX_BYTES as u64));
        assert_eq!(over.bodies_m, 2_000_000 + 2 * 4_000_000);
        assert_eq!(Capacity::for_shape(&shape(10, 0, 10, 1000)).bodies_m, 1024);
    }

    /// The answer table has room for the nodes' records after the answers'; past its largest
    /// size the nodes (written last) are the first left out: `xdns_nodes` gets twice them.
    #[test]
    fn node_room() {
        let shape = |nodes: usize, answers: usize, record_bytes: u64| crate::data::Shape { nodes, answers, class_m: 0, class_l: 0, record_bytes };
        let c = Capacity::for_shape(&shape(1_000_000, 2_000_000, 100 << 20));
        let bytes = (100 << 20) + NODE_RECORD as u64 * 1_000_000 + 4;
        assert_eq!(c.table_bytes, bytes + bytes / 8);
        assert_eq!(c.nodes, 250_000);
        assert_eq!(Capacity::for_shape(&shape(10_000, 20_000, 1 << 20)).nodes, 2 * IN_PLACE_MIN_NAMES as u32, "one update's, twice");
        let past = Capacity::for_shape(&shape(1_000_000, 2_000_000, TABLE_MAX_BYTES as u64));
        assert_eq!(past.nodes, 250_000 + 2 * 1_000_000, "every node past the table, twice");
        assert_eq!(past.answers, 500_000, "no answer past it");
    }

    #[test]
    fn growing_never_shrinks_a_map() {
        let a = Capacity { nodes: 10, answers: 5000, bodies_m: 7, bodies_l: 9, table_vals: 100, table_bytes: 1 << 20 };
        let b = Capacity { nodes: 9000, answers: 10, bodies_m: 70, bodies_l: 1, table_vals: 0, table_bytes: 0 };
        let m = a.max(&b);
        assert_eq!((m.nodes, m.answers, m.bodies_m, m.bodies_l), (9000, 5000, 70, 9));
        // table_vals 0 means "as many as answers": 10 for b, 100 for a
        assert_eq!(m.table_keys(), 100);
        assert_eq!(m.table_bytes(), 1 << 20);
        assert!(m.holds(&a) && m.holds(&b));
        assert!(!a.holds(&b) && !b.holds(&a));
        assert_eq!(m.max(&a).table_bytes(), m.table_bytes(), "max is idempotent");
        let shown = m.to_string();
        assert!(shown.contains("9000 hashed nodes") && shown.contains("table of 100 keys"), "{shown}");
    }
}
