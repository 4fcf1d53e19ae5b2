//! Bench: the in-place index of one zone ([`xdns_bpf::delta::ZoneIndex`], the NSEC3 part
//! included when the zone is NSEC3-signed), built as a full generation builds it: its time and
//! the resident memory it adds. For profiling (`perf record --call-graph dwarf`) and before/after.
//!
//!     cargo run --release -p xdns-bpf --example nsec3_index -- ZONE_FILE ORIGIN [ROUNDS]
//!
//! e.g. `bench/out/tld-1000000-nsec3-optout.zone tld.`. Prints one JSON line per round; asserts
//! nothing (what the index maps is held by delta.rs's oracle tests).

use std::collections::HashSet;
use std::time::Instant;

use xdns_bpf::delta::ZoneIndex;

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// CPU seconds of the process so far, every thread (the machine may be busy: wall time
/// then says little).
fn cpu_seconds() -> f64 {
    // SAFETY: getrusage fills the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    s(u.ru_utime) + s(u.ru_stime)
}

/// The resident set once the allocator has given back what it can (`malloc_trim`).
fn trimmed_rss_kib() -> u64 {
    // SAFETY: malloc_trim only releases free memory of the allocator's own heaps.
    unsafe { libc::malloc_trim(0) };
    rss_kib()
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [file, origin, rest @ ..] = &args[..] else {
        eprintln!("usage: nsec3_index ZONE_FILE ORIGIN [ROUNDS]");
        std::process::exit(2);
    };
    let rounds: usize = rest.first().and_then(|r| r.parse().ok()).unwrap_or(3);
    let t = Instant::now();
    let src = xdns_zone::ZoneSource { name: origin.clone(), file: file.into() };
    let zone = match xdns_zone::load_zone(&src, None) {
        Ok(z) => z,
        Err(e) => {
            eprintln!("{file}: {:?}", e.first());
            std::process::exit(1);
        }
    };
    let _ = zone.dnssec(); // built by the load's validation or the compile, before the index
    eprintln!("loaded {} nodes in {:.1} s", zone.nodes.len(), t.elapsed().as_secs_f64());
    for round in 0..rounds {
        let before = trimmed_rss_kib();
        let (t, cpu) = (Instant::now(), cpu_seconds());
        let ix = ZoneIndex::build(&zone, HashSet::new(), usize::MAX);
        let (secs, cpu) = (t.elapsed().as_secs_f64(), cpu_seconds() - cpu);
        // what the index holds, its build's garbage given back
        let grown = trimmed_rss_kib().saturating_sub(before);
        let (matched, covered, enclosers) = ix.nsec3.as_ref().map_or((0, 0, 0), |n| (n.matched.len(), n.covered.len(), n.enclosers.len()));
        println!(
            "{{\"round\": {round}, \"seconds\": {secs:.3}, \"cpu_seconds\": {cpu:.3}, \"rss_held_mib\": {:.1}, \"matched\": {matched}, \"covered\": {covered}, \"enclosers\": {enclosers}, \"targets\": {}}}",
            grown as f64 / 1024.0,
            ix.targets.len()
        );
        drop(ix);
    }
}
