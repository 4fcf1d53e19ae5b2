//! How far start-up has got, for `xdns stats` while a large zone set loads (issue 30): the
//! control socket answers from the first moment of a fresh start, long before the zones are
//! loaded, compiled for the kernel and written to its maps.
//!
//! One process-wide record ([`STARTUP`]): the phase, and the records read by the zone
//! loader and the answers compiled for the kernel so far (of this start, or of the last
//! reload once started). The kernel maps' fill has its own counters (`xdp_fill`).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering::Relaxed};

/// Start-up phases, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Phase {
    /// Reading the zone files.
    LoadingZones = 0,
    /// Compiling the answers the kernel holds.
    CompilingAnswers = 1,
    /// Loading the XDP program (the verifier) and creating its maps.
    LoadingProgram = 2,
    /// Binding sockets, attaching, dropping privileges.
    Starting = 3,
    /// Started: serving (the kernel maps may still be filling: `xdp_fill`).
    Serving = 4,
}

impl Phase {
    pub fn name(self) -> &'static str {
        match self {
            Phase::LoadingZones => "loading zones",
            Phase::CompilingAnswers => "compiling answers for the kernel",
            Phase::LoadingProgram => "loading the XDP program",
            Phase::Starting => "starting",
            Phase::Serving => "serving",
        }
    }

    fn from_u8(v: u8) -> Phase {
        match v {
            0 => Phase::LoadingZones,
            1 => Phase::CompilingAnswers,
            2 => Phase::LoadingProgram,
            3 => Phase::Starting,
            _ => Phase::Serving,
        }
    }
}

/// Start-up's phase and counts, updated by the loaders, read by `xdns stats`.
#[derive(Debug)]
pub struct Startup {
    phase: AtomicU8,
    /// XDP is configured: until started, `xdp_data_active` is false.
    xdp: AtomicBool,
    records_loaded: AtomicU64,
    answers_compiled: AtomicU64,
}

/// The process's start-up progress.
pub static STARTUP: Startup = Startup::new();

impl Startup {
    /// No start under way ([`Phase::Serving`]) until [`Self::start`].
    pub const fn new() -> Self {
        Self { phase: AtomicU8::new(Phase::Serving as u8), xdp: AtomicBool::new(false), records_loaded: AtomicU64::new(0), answers_compiled: AtomicU64::new(0) }
    }

    /// A start begins (`xdp`: with XDP interfaces configured).
    pub fn start(&self, xdp: bool) {
        self.xdp.store(xdp, Relaxed);
        self.set_phase(Phase::LoadingZones);
    }

    /// The answers are compiled: the program loads next (a reload's compile, once started,
    /// changes no phase).
    pub fn compiled(&self) {
        let _ = self.phase.compare_exchange(Phase::CompilingAnswers as u8, Phase::LoadingProgram as u8, Relaxed, Relaxed);
    }

    pub fn set_phase(&self, p: Phase) {
        self.phase.store(p as u8, Relaxed);
    }

    pub fn phase(&self) -> Phase {
        Phase::from_u8(self.phase.load(Relaxed))
    }

    /// Records read by the zone loader (set to 0 as a build begins, then [`Self::add_records`]).
    pub fn records_loaded(&self, n: u64) {
        self.records_loaded.store(n, Relaxed);
    }

    /// `n` more records read.
    pub fn add_records(&self, n: u64) {
        self.records_loaded.fetch_add(n, Relaxed);
    }

    pub fn answers_compiled(&self, n: u64) {
        self.answers_compiled.store(n, Relaxed);
    }

    /// The `load` group of `xdns stats` and its phase.
    pub fn snapshot(&self, s: &mut crate::stats::Snapshot) {
        let phase = self.phase();
        if phase != Phase::Serving {
            s.starting = Some(phase.name().to_string());
            if self.xdp.load(Relaxed) {
                // the fast path is not even loaded: its data is not in the kernel
                s.xdp_data_active.get_or_insert(false);
            }
        }
        let mut g = crate::stats::Group::counters(
            "Zone data of the last start or reload: records read from the zone files, answers compiled for the kernel (entries written to the kernel maps: xdp_fill).",
            "counter",
            [
                ("records_loaded".to_string(), self.records_loaded.load(Relaxed)),
                ("answers_compiled".to_string(), self.answers_compiled.load(Relaxed)),
            ],
        );
        g.meta.gauge = true;
        s.groups.insert("load".to_string(), g);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_show_until_serving() {
        let p = Startup::new();
        let mut s = crate::stats::Snapshot::default();
        p.snapshot(&mut s);
        assert_eq!(s.starting, None, "no start under way");
        p.start(true);
        p.records_loaded(300_000);
        p.set_phase(Phase::CompilingAnswers);
        p.answers_compiled(4096);
        p.snapshot(&mut s);
        assert_eq!(s.starting.as_deref(), Some("compiling answers for the kernel"));
        assert_eq!(s.xdp_data_active, Some(false));
        assert_eq!(s.groups["load"].values["records_loaded"], 300_000);
        assert_eq!(s.groups["load"].values["answers_compiled"], 4096);
        p.set_phase(Phase::Serving);
        let mut s = crate::stats::Snapshot::default();
        p.snapshot(&mut s);
        assert_eq!(s.starting, None);
    }
}
