//! What serving a signed zone costs, against the same zone unsigned: load time and memory per
//! record, the time to compile every body (what the kernel data build does), and userspace
//! ns per answer with DO=0 and DO=1. Prints a table and a bar chart of the ratios.
//!
//! Without settings it builds both zones itself (NSEC-signed shape: every RRset with a
//! 64-byte ECDSA-sized RRSIG, an NSEC chain in canonical order; the signatures are not
//! valid, which costs the same to load and serve). With `XDNS_BENCH_UNSIGNED` and
//! `XDNS_BENCH_SIGNED` (and `XDNS_BENCH_ORIGIN`) it compares two real files, e.g. a zone and
//! Knot's signed copy (`bench/dnssec.py` makes them):
//!
//! `cargo test --release -p xdns-zone --test dnssec_bench -- --nocapture`

use std::path::PathBuf;
use std::time::Instant;

use xdns_wire::name;
use xdns_zone::dnssec::canonical_cmp;
use xdns_zone::load::{load_zone_with_warnings, ZoneSource};
use xdns_zone::{respond, RespondConfig, Transport, Zone, ZoneSet};

/// Hosts in the generated zones (fewer in debug builds, where the suite runs this too).
const NAMES: usize = if cfg!(debug_assertions) { 2_000 } else { 20_000 };

fn rss_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = s.split_whitespace().nth(1).and_then(|p| p.parse().ok()).unwrap_or(0);
    pages * 4
}

/// The unsigned and the signed-shaped zone of `NAMES` hosts (A each, AAAA on every 4th).
fn generated() -> (PathBuf, PathBuf) {
    let d = std::env::temp_dir().join(format!("xdns-dnssec-bench-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    let sig = "MEUCIQDnb3tLw2ysbZ3wjWg6cKsyJzgOa1bq8yfRa8IYhOAjtgIgEcYqXzqxd1l1fcNYlpzuv2Q8N2Ux4xJcK7D1vNvTzFs=";
    let rrsig = |t: &str, labels: usize| format!(" RRSIG {t} 13 {labels} 3600 20300101000000 20200101000000 4711 bench.test. {sig}\n");
    let mut unsigned = String::from("$TTL 3600\n@ SOA ns1 hostmaster 1 7200 3600 1209600 300\n@ NS ns1\nns1 A 198.18.0.1\n");
    let mut signed = unsigned.clone();
    signed.push_str(&format!("@{}@{}@ DNSKEY 257 3 13 mdsswUyr3DPW132mOi8V9xESWE8jTo0dxCjjnopKl+GqJxpVXckHAeF+KkxLbxILfDLUT0rAK9iUzy1L53eKGQ==\n@{}ns1{}", rrsig("SOA", 2), rrsig("NS", 2), rrsig("DNSKEY", 2), rrsig("A", 3)));
    let mut owners: Vec<Vec<u8>> = vec![name::from_presentation("bench.test.").unwrap(), name::from_presentation("ns1.bench.test.").unwrap()];
    for i in 0..NAMES {
        let host = format!("h{i}");
        let a = format!("{host} A 198.18.{}.{}\n", (i >> 8) & 255, i & 255);
        unsigned.push_str(&a);
        signed.push_str(&a);
        signed.push_str(&format!("{host}{}", rrsig("A", 3)));
        if i % 4 == 0 {
            let aaaa = format!("{host} AAAA 2001:db8::{i:x}\n");
            unsigned.push_str(&aaaa);
            signed.push_str(&aaaa);
            signed.push_str(&format!("{host}{}", rrsig("AAAA", 3)));
        }
        owners.push(name::from_presentation(&format!("{host}.bench.test.")).unwrap());
    }
    owners.sort_by(|a, b| canonical_cmp(a, b));
    for (i, o) in owners.iter().enumerate() {
        let next = &owners[(i + 1) % owners.len()];
        let (own, nxt) = (name::to_presentation(o), name::to_presentation(next));
        signed.push_str(&format!("{own} 300 NSEC {nxt} A AAAA RRSIG NSEC\n{own} 300{}", rrsig("NSEC", name::label_count(o))));
    }
    let (u, s) = (d.join("unsigned.zone"), d.join("signed.zone"));
    std::fs::write(&u, unsigned).unwrap();
    std::fs::write(&s, signed).unwrap();
    (u, s)
}

struct Cost {
    records: u64,
    load_s: f64,
    kib: u64,
    bodies: usize,
    body_bytes: usize,
    compile_s: f64,
    do_bodies: usize,
    do_bytes: usize,
    ns: Vec<(String, f64)>,
}

fn query(qname: &str, qtype: u16, dnssec_ok: bool) -> Vec<u8> {
    let mut q = vec![0x12, 0x34, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1];
    q.extend(name::from_presentation(qname).unwrap());
    q.extend_from_slice(&qtype.to_be_bytes());
    q.extend_from_slice(&[0, 1, 0, 0, 41, 0x04, 0xd0, 0, 0, if dnssec_ok { 0x80 } else { 0 }, 0, 0, 0]);
    q
}

fn measure(file: PathBuf, origin: &str) -> (Cost, Zone) {
    let before = rss_kib();
    let t = Instant::now();
    let l = load_zone_with_warnings(&ZoneSource { name: origin.into(), file }, None).unwrap_or_else(|e| panic!("{}", e[0]));
    let load_s = t.elapsed().as_secs_f64();
    let kib = rss_kib().saturating_sub(before);
    let t = Instant::now();
    let (mut bodies, mut body_bytes) = (0, 0);
    for (_, b) in xdns_zone::compile_all(&l.zone) {
        bodies += 1;
        body_bytes += b.bytes.len();
    }
    // The kernel's DO bodies (xdns-bpf's data::zone_answers): Type and Other keys of a signed zone.
    let (mut do_bodies, mut do_bytes) = (0, 0);
    if xdns_zone::compile::is_signed(&l.zone) {
        for k in xdns_zone::enumerate(&l.zone) {
            if matches!(k.kind, xdns_zone::BodyKind::Type(_) | xdns_zone::BodyKind::Other) {
                do_bodies += 1;
                do_bytes += xdns_zone::compile::compile_dnssec(&l.zone, &k, &k.base).bytes.len();
            }
        }
    }
    let compile_s = t.elapsed().as_secs_f64();
    let zone = l.zone;
    let mut set = ZoneSet::default();
    set.zones.insert(zone.apex.clone(), std::sync::Arc::new(zone.clone()));
    let cfg = RespondConfig::default();
    let mut out = Vec::new();
    let mut ns = Vec::new();
    let o = origin.trim_end_matches('.');
    for (what, qn, qt) in [("positive A", format!("h17.{o}."), 1u16), ("NODATA", format!("h17.{o}."), 16), ("NXDOMAIN", format!("nx17.{o}."), 1)] {
        for d in [false, true] {
            let qs: Vec<Vec<u8>> = (0..64).map(|i| query(&qn.replace("17", &format!("{}", 17 + i * 97)), qt, d)).collect();
            let n = 20_000;
            let t = Instant::now();
            for i in 0..n {
                respond(&set, &qs[i % qs.len()], Transport::Udp, &cfg, &mut out);
            }
            ns.push((format!("{what}, DO={}", u8::from(d)), t.elapsed().as_nanos() as f64 / n as f64));
        }
    }
    (Cost { records: l.records, load_s, kib, bodies, body_bytes, compile_s, do_bodies, do_bytes, ns }, zone)
}

#[test]
fn signed_versus_unsigned() {
    let origin = std::env::var("XDNS_BENCH_ORIGIN").unwrap_or_else(|_| "bench.test.".into());
    let (u, s) = match (std::env::var("XDNS_BENCH_UNSIGNED"), std::env::var("XDNS_BENCH_SIGNED")) {
        (Ok(u), Ok(s)) => (PathBuf::from(u), PathBuf::from(s)),
        _ => generated(),
    };
    let (cu, zu) = measure(u, &origin);
    let (cs, zs) = measure(s, &origin);
    assert!(!xdns_zone::compile::is_signed(&zu) && xdns_zone::compile::is_signed(&zs), "the zones are what they claim");
    assert!(cs.records > cu.records);
    let per = |c: &Cost, v: f64| v / c.records as f64;
    let rows: Vec<(String, f64, f64)> = vec![
        ("records".into(), cu.records as f64, cs.records as f64),
        ("load, us per record".into(), per(&cu, cu.load_s * 1e6), per(&cs, cs.load_s * 1e6)),
        ("RSS after load, bytes per record".into(), per(&cu, cu.kib as f64 * 1024.0), per(&cs, cs.kib as f64 * 1024.0)),
        ("bodies compiled (kernel keys, DO=0)".into(), cu.bodies as f64, cs.bodies as f64),
        ("body bytes".into(), cu.body_bytes as f64, cs.body_bytes as f64),
        ("compile all bodies (and DO bodies), us per record".into(), per(&cu, cu.compile_s * 1e6), per(&cs, cs.compile_s * 1e6)),
        ("kernel DO bodies (Type, Other)".into(), cu.do_bodies as f64, cs.do_bodies as f64),
        ("kernel DO body bytes".into(), cu.do_bytes as f64, cs.do_bytes as f64),
    ]
    .into_iter()
    .chain(cu.ns.iter().zip(&cs.ns).map(|((w, a), (_, b))| (format!("userspace answer ns, {w}"), *a, *b)))
    .collect();
    println!("\n| measure | unsigned | signed | signed / unsigned |\n|---|---|---|---|");
    for (w, a, b) in &rows {
        let ratio = if *a > 0.0 { format!("{:.2}", b / a) } else { "-".into() };
        println!("| {w} | {a:.1} | {b:.1} | {ratio} |");
    }
    println!("\nsigned / unsigned (each # = 0.25):");
    for (w, a, b) in rows.iter().filter(|r| r.1 > 0.0) {
        let r = b / a;
        println!("{w:>42} {:<40} {r:.2}", "#".repeat(((r / 0.25).round() as usize).min(40)));
    }
    // DO=0 answers of the signed zone are the unsigned answers: the same work.
    let dnssec_ok_positive = cs.ns[1].1;
    assert!(dnssec_ok_positive > 0.0);
}
