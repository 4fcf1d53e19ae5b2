//! The streamed fill (issue 30): the zones compiled one key at a time as the loader writes
//! them (`maps::Stream::compile`) give exactly the map contents of the whole-data path
//! (`compile_kernel_data`, then `Loader::install`), and both agree entry by entry with the
//! all-at-once encoder (`data::encode`, which knows each name's own `Other` body by name, not
//! by the loader's hash set). In-memory maps: no root needed.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use xdns_bpf::data::{compile_kernel_data, encode, BodyValue, KernelData, Shape};
use xdns_bpf::maps::{Loader, MemMaps, Stream, CHUNK};
use xdns_bpf::runtime::Capacity;
use xdns_zone::{load_zone, ZoneSet, ZoneSource};

const SEED: u64 = 0x5eed_0123_4567_89ab;

fn load(set: &mut ZoneSet, apex: &str, file: PathBuf) {
    let z = load_zone(&ZoneSource { name: apex.into(), file: file.clone() }, None).unwrap_or_else(|e| panic!("{file:?}: {e:?}"));
    set.zones.insert(z.apex.clone(), Arc::new(z));
}

/// The test zones (delegations with glue and DS, wildcards, CNAME chains and loops, empty
/// non-terminals) and a generated TLD-like zone of `delegations` delegations (two NS each,
/// glue for every third, DS for every fifth, a wildcard and CNAMEs between them) served
/// beside a child zone of its own: several chunks of answers and of nodes.
fn zones(delegations: usize) -> ZoneSet {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/zones");
    let mut set = ZoneSet::default();
    load(&mut set, "example.com.", dir.join("example.com.zone"));
    load(&mut set, "example.net.", dir.join("example.net.zone"));
    let tmp = std::env::temp_dir().join(format!("xdns-fill-{}-{delegations}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let mut z = String::from("$TTL 3600\n@ SOA ns1 h 1 7200 3600 1209600 300\n@ NS ns1\n@ NS ns2.example.net.\nns1 A 198.18.0.1\n");
    z.push_str("*.w A 198.18.0.9\n*.w AAAA 2001:db8::9\nc1 CNAME d3\nc2 CNAME c1\nc3 CNAME nowhere\nchild NS ns1\n");
    for i in 0..delegations {
        z.push_str(&format!("d{i} NS ns.d{i}\nd{i} NS ns{}.example.net.\n", i % 7));
        if i % 3 == 0 {
            z.push_str(&format!("ns.d{i} A 198.18.{}.{}\n", (i >> 8) & 255, i & 255));
        }
        if i % 5 == 0 {
            z.push_str(&format!("d{i} DS {i} 13 2 ddc6e2b224d0fd821669202258386936fc9ce2899e215eec6322b95f8dd96d6a\n"));
        }
    }
    std::fs::write(tmp.join("tld.zone"), z).unwrap();
    std::fs::write(tmp.join("child.zone"), "$TTL 60\n@ SOA ns1.tld. h 1 7200 3600 1209600 300\n@ NS ns1.tld.\nwww A 198.18.1.1\n").unwrap();
    load(&mut set, "tld.", tmp.join("tld.zone"));
    load(&mut set, "child.tld.", tmp.join("child.zone"));
    std::fs::remove_dir_all(&tmp).unwrap();
    set
}

/// Maps shaped as the daemon shapes them for `data`: a presence filter and an answer table.
fn maps_for(data: &KernelData) -> MemMaps {
    let c = Capacity::for_data(data);
    let mut m = MemMaps::default();
    m.filter_words = c.filter_words();
    m.table_shape = (c.table_buckets(), c.table_bytes());
    m
}

/// Everything the maps hold, comparable: nodes, answers, bodies, filter halves, the answer
/// table's halves (index and records), the generation, the label floor.
/// One map's entries, key to a printed value.
type Entries = BTreeMap<Vec<u8>, String>;

fn contents(m: &MemMaps) -> (Entries, Entries, Entries, String, String) {
    let dbg = |v: &dyn std::fmt::Debug| format!("{v:?}");
    let nodes = m.nodes.iter().map(|(k, v)| (k.clone(), dbg(v))).collect();
    let answers = m.answers.iter().map(|(k, v)| (k.clone(), dbg(v))).collect();
    let bodies = m.bodies.iter().map(|(k, v)| (k.clone(), dbg(v))).collect();
    let table = m
        .table
        .iter()
        .map(|t| (dbg(&t.index), t.vals.iter().map(|(i, a)| (*i, dbg(a))).collect::<BTreeMap<_, _>>()))
        .collect::<Vec<_>>();
    (nodes, answers, bodies, dbg(&m.filter), format!("{table:?} gen {} floor {}", m.gen, m.floor))
}

#[test]
fn streamed_fill_writes_what_the_whole_data_writes() {
    // (delegations without DS store one answer each, their referral: DS NODATA is shared)
    let set = zones(2 * CHUNK);
    let data = compile_kernel_data(&set);
    assert!(data.answers.len() > 2 * CHUNK && data.nodes.len() > CHUNK, "several chunks of each");

    let mut whole = maps_for(&data);
    let mut lw = Loader::new(SEED);
    lw.install(&mut whole, &data).unwrap();
    let mut streamed = maps_for(&data);
    let mut ls = Loader::new(SEED);
    ls.install_stream(&mut streamed, Stream::compile(&set, 0)).unwrap();
    assert_eq!(contents(&streamed), contents(&whole), "same map contents");
    assert_eq!(ls.table_counts(), lw.table_counts());
    let (placed, left_out) = ls.table_counts();
    assert_eq!(placed + left_out, data.answers.len());
    assert!(placed > data.answers.len() * 9 / 10, "the table holds (nearly) every answer: {placed}, {left_out} left out");
    assert_eq!(streamed.progress.get(), ((data.nodes.len() + data.answers.len()) as u64, (data.nodes.len() + data.answers.len()) as u64),
        "the progress total ends exact though none was expected");

    // entry by entry, as the all-at-once encoder makes them (own `Other` bodies by name)
    let enc = encode(&data, SEED, 1);
    assert_eq!(streamed.nodes.len(), enc.nodes.len());
    for (k, v) in &enc.nodes {
        assert_eq!(format!("{:?}", streamed.node(k)), format!("{:?}", Some(v)), "node {k:?}");
    }
    assert!(enc.nodes.iter().any(|(_, v)| v.flags & xdns_bpf::data::NODE_NODATA_APEX != 0), "some NODATA shared");
    assert!(enc.nodes.iter().any(|(_, v)| v.flags & xdns_bpf::data::NODE_CUT != 0), "cuts");
    assert_eq!(streamed.answers.len(), enc.answers.len());
    for (k, a, b) in &enc.answers {
        // a class M answer placed in the table is its record, bytes inline (`BODY_INLINE`):
        // the in-memory maps keep its bytes under that version; else the encoder's answer
        let got = streamed.answer(k).copied();
        let inline = got.is_some_and(|g| g.body_ver == xdns_bpf::data::BODY_INLINE);
        assert!(!inline || matches!(b, BodyValue::M(_)), "answer {k:?}: only class M is inline");
        let plain = got.map(|g| xdns_bpf::types::xdns_answer { body_ver: if inline { 0 } else { g.body_ver }, ..g });
        assert_eq!(format!("{plain:?}"), format!("{:?}", Some(a)), "answer {k:?}");
        let at = got.map_or(*k, |g| xdns_bpf::maps::body_key(k, &g));
        let at = if matches!(b, BodyValue::S { .. }) { *k } else { at };
        let stored = streamed.bodies.get(&key_bytes(&at)).map(|(_, bytes, _)| bytes.clone());
        let want = match b {
            BodyValue::S { bytes, .. } => Some(bytes.clone()),
            BodyValue::M(m) => Some(m.bytes[..usize::from(a.len)].to_vec()),
            BodyValue::L(l) => Some(l.bytes[..usize::from(a.len)].to_vec()),
            BodyValue::Userspace => None,
        };
        assert_eq!(stored, want, "body {k:?}");
    }

    // a reload streamed too: the new generation holds the same entries, the old one is gone
    let mut again = maps_for(&data);
    let mut lr = Loader::new(SEED);
    lr.install(&mut again, &data).unwrap();
    lr.install_stream(&mut again, Stream::compile(&set, 0)).unwrap();
    lw.install(&mut whole, &data).unwrap();
    assert_eq!(contents(&again), contents(&whole), "generation 2, streamed or whole");
}

/// The key's bytes, as `MemMaps` stores them.
fn key_bytes(k: &xdns_bpf::types::xdns_answer_key) -> Vec<u8> {
    // SAFETY: a plain `#[repr(C)]` ABI struct with explicit padding fields.
    unsafe { std::slice::from_raw_parts((k as *const xdns_bpf::types::xdns_answer_key).cast::<u8>(), std::mem::size_of_val(k)) }.to_vec()
}

/// The maps' sizes from the zones alone: exact for a zone set of at most
/// `Shape::EXACT_NAMES` names, within a few percent above (a sample of the keys compiled).
#[test]
fn shape_estimate() {
    let small = zones(1000);
    assert_eq!(Shape::estimate(&small), Shape::of(&compile_kernel_data(&small)));
    let big = zones(Shape::EXACT_NAMES * 3 / 4 + 2000);
    let exact = Shape::of(&compile_kernel_data(&big));
    let est = Shape::estimate(&big);
    assert_eq!(est.nodes, exact.nodes);
    let near = |e: f64, x: f64| (e - x).abs() <= 0.03 * x;
    assert!(near(est.answers as f64, exact.answers as f64), "{est:?} vs {exact:?}");
    assert!(near(est.record_bytes as f64, exact.record_bytes as f64), "{est:?} vs {exact:?}");
    assert_ne!(est, exact, "sampled, not compiled whole");
}
