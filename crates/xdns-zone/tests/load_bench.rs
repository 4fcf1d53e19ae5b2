//! Load-time measurement. Without settings it loads a generated 20,000-name zone (a quick check
//! that the timer path works); with `XDNS_BENCH_ZONE` it loads and times that file:
//!
//! `XDNS_BENCH_ZONE=/tmp/big/big.zone XDNS_BENCH_ORIGIN=example.com. \
//!  cargo test --release -p xdns-zone --test load_bench -- --nocapture`

use std::path::PathBuf;
use std::time::Instant;

use xdns_zone::load::{load_zone_with_warnings, ZoneSource};

/// Writes a zone of `n` names with an A record each (plus AAAA on every 10th) and returns it.
fn generated(n: u32) -> PathBuf {
    let d = std::env::temp_dir().join(format!("xdns-load-bench-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    let mut text = String::from(
        "$TTL 3600\n@ SOA ns1 hostmaster 1 7200 3600 1209600 300\n  NS ns1\nns1 A 198.18.0.1\n",
    );
    for i in 0..n {
        text.push_str(&format!("h{i} A 198.18.{}.{}\n", (i >> 8) & 255, i & 255));
        if i % 10 == 0 {
            text.push_str(&format!("h{i} AAAA 2001:db8::{:x}\n", i));
        }
    }
    let f = d.join("gen.zone");
    std::fs::write(&f, text).unwrap();
    f
}

#[test]
fn load_big_zone() {
    let (file, want_nodes) = match std::env::var("XDNS_BENCH_ZONE") {
        Ok(f) => (PathBuf::from(f), None),
        Err(_) => (generated(20_000), Some(20_000 + 2)),
    };
    let name = std::env::var("XDNS_BENCH_ORIGIN").unwrap_or_else(|_| "example.com.".into());
    let t = Instant::now();
    let l = load_zone_with_warnings(&ZoneSource { name, file }, None)
        .unwrap_or_else(|e| panic!("{}", e[0]));
    let el = t.elapsed();
    println!(
        "loaded {} records, {} nodes in {:.3}s",
        l.records,
        l.zone.nodes.len(),
        el.as_secs_f64()
    );
    assert!(l.records > 0);
    if let Some(n) = want_nodes {
        assert_eq!(l.zone.nodes.len(), n);
        assert_eq!(l.records, 20_000 + 2_000 + 3);
    }
    let t = Instant::now();
    drop(l);
    println!("dropped in {:.3}s", t.elapsed().as_secs_f64());
}
