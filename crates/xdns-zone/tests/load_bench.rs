//! Load-time measurement for big zones (ignored by default; needs a zone file).
//!
//! `XDNS_BENCH_ZONE=/tmp/big/big.zone XDNS_BENCH_ORIGIN=example.com. \
//!  cargo test --release -p xdns-zone --test load_bench -- --ignored --nocapture`

use std::time::Instant;

use xdns_zone::load::{load_zone_with_warnings, ZoneSource};

#[test]
#[ignore]
fn load_big_zone() {
    let Ok(file) = std::env::var("XDNS_BENCH_ZONE") else {
        panic!("set XDNS_BENCH_ZONE to a zone file");
    };
    let name = std::env::var("XDNS_BENCH_ORIGIN").unwrap_or_else(|_| "example.com.".into());
    let t = Instant::now();
    let l = load_zone_with_warnings(
        &ZoneSource {
            name,
            file: file.into(),
        },
        None,
    )
    .unwrap_or_else(|e| panic!("{}", e[0]));
    let el = t.elapsed();
    println!(
        "loaded {} records, {} nodes in {:.3}s",
        l.records,
        l.zone.nodes.len(),
        el.as_secs_f64()
    );
    assert!(l.records > 0);
    let t = Instant::now();
    drop(l);
    println!("dropped in {:.3}s", t.elapsed().as_secs_f64());
}
