//! Throughput of the userspace answer path (ignored by default; run in release once:
//! `cargo test --release -p xdns-zone --test engine_perf -- --ignored --nocapture`).
mod engine_support;
use engine_support::*;
use std::time::Instant;
use xdns_zone::{respond, Outcome, RespondConfig, Transport};

#[test]
#[ignore]
fn respond_throughput() {
    let z = zone_set();
    let qs: Vec<Vec<u8>> = [
        ("www.example.com.", 1u16),
        ("a.example.com.", 1),
        ("foo.wild.example.com.", 1),
        ("nope.example.com.", 1),
        ("sub.example.com.", 1),
        ("example.com.", 15),
        ("big.example.com.", 16),
    ]
    .iter()
    .map(|(n, t)| query(1, n, *t, Some(Edns { payload: 1232, dnssec_ok: false, version: 0 })))
    .collect();
    let cfg = RespondConfig::default();
    let mut out = Vec::with_capacity(1500);
    let rounds = 200_000;
    let start = Instant::now();
    let mut answered = 0usize;
    for i in 0..rounds {
        let q = &qs[i % qs.len()];
        if let Outcome::Answered { .. } = respond(&z, q, Transport::Udp, &cfg, &mut out) {
            answered += 1;
        }
    }
    let el = start.elapsed();
    assert_eq!(answered, rounds);
    println!("{rounds} responses in {el:?}: {:.0} ns each, {:.0} k/s on one core", el.as_nanos() as f64 / rounds as f64, rounds as f64 / el.as_secs_f64() / 1000.0);
}
