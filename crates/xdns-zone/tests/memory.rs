//! Heap bytes per record of a loaded zone, counted by a global allocator. Without settings it
//! loads a generated zone and holds the tree to a budget; with `XDNS_BENCH_ZONE` (and
//! `XDNS_BENCH_ORIGIN`) it loads that file and prints the figures:
//!
//! `XDNS_BENCH_ZONE=/tmp/tld.zone XDNS_BENCH_ORIGIN=tld. \
//!  cargo test --release -p xdns-zone --test memory -- --nocapture`

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use xdns_zone::load::{load_zone_with_warnings, ZoneSource};

struct Counting;
static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
static BLOCKS: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let n = LIVE.fetch_add(l.size(), Relaxed) + l.size();
        PEAK.fetch_max(n, Relaxed);
        BLOCKS.fetch_add(1, Relaxed);
        System.alloc(l)
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size(), Relaxed);
        BLOCKS.fetch_sub(1, Relaxed);
        System.dealloc(p, l)
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        let n = if new >= l.size() {
            LIVE.fetch_add(new - l.size(), Relaxed) + new - l.size()
        } else {
            LIVE.fetch_sub(l.size() - new, Relaxed) - (l.size() - new)
        };
        PEAK.fetch_max(n, Relaxed);
        System.realloc(p, l, new)
    }
}

#[global_allocator]
static A: Counting = Counting;

/// A TLD-like zone (`bench/genzone.py --shape tld` in miniature): delegations with two NS,
/// glue for 30%, DS for 20%.
fn generated(n: u32) -> PathBuf {
    let d = std::env::temp_dir().join(format!("xdns-mem-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    let mut t = String::from("$TTL 86400\n@ SOA a.nic hostmaster 1 1800 900 604800 3600\n");
    t.push_str("@ NS a.nic\n@ NS b.nic\na.nic A 198.18.0.1\nb.nic A 198.18.0.2\n");
    for i in 0..n {
        if i % 10 < 3 {
            t.push_str(&format!("d{i} NS ns1.d{i}\nd{i} NS ns2.d{i}\n"));
            t.push_str(&format!("ns1.d{i} A 198.18.{}.{}\n", (i >> 8) & 255, i & 255));
            t.push_str(&format!("ns2.d{i} A 198.19.{}.{}\n", (i >> 8) & 255, i & 255));
        } else {
            let h = i % 2000;
            t.push_str(&format!("d{i} NS ns1.hoster{h}.example.\nd{i} NS ns2.hoster{h}.example.\n"));
        }
        if i % 5 == 0 {
            t.push_str(&format!("d{i} DS {} 13 2 {i:064x}\n", 10000 + i % 50000));
        }
    }
    let f = d.join("tld.zone");
    std::fs::write(&f, t).unwrap();
    f
}

#[test]
fn zone_heap_per_record() {
    let env = std::env::var("XDNS_BENCH_ZONE").ok();
    let (file, name) = match &env {
        Some(f) => (PathBuf::from(f), std::env::var("XDNS_BENCH_ORIGIN").unwrap_or("tld.".into())),
        None => (generated(30_000), "tld.".to_string()),
    };
    let base = LIVE.load(Relaxed);
    let base_blocks = BLOCKS.load(Relaxed);
    PEAK.store(base, Relaxed);
    let l = load_zone_with_warnings(&ZoneSource { name, file }, None).unwrap_or_else(|e| panic!("{}", e[0]));
    let live = LIVE.load(Relaxed) - base;
    let blocks = BLOCKS.load(Relaxed) - base_blocks;
    let peak = PEAK.load(Relaxed) - base;
    let recs = l.records as usize;
    println!(
        "records {recs} nodes {} live {:.1} MiB ({} B/record, {} blocks) load peak {:.1} MiB",
        l.zone.nodes.len(),
        live as f64 / 1048576.0,
        live / recs,
        blocks,
        peak as f64 / 1048576.0
    );
    if env.is_none() {
        // 30,000 delegations, 84,005 records.
        assert_eq!(recs, 84_005);
        assert!(live / recs <= BUDGET, "{} B/record > {BUDGET}", live / recs);
    }
}

/// Heap bytes per record the generated zone may take.
const BUDGET: usize = 130;
