//! Zone maps that grow in process (needs root): data that does not fit in the maps sized at
//! load is installed into a second program with larger zone maps
//! (`XdpProgram::install_grown`), which reuses every other map; the old data answers until
//! the new is whole, and the new is answered from the kernel afterwards.

mod common;

use common::*;
use xdns_bpf::data::{AnswerEntry, KernelData, Kind, NodeEntry};
use xdns_bpf::runtime::{Capacity, LoadConfig, XdpProgram, ZONE_MAPS};
use xdns_wire::body::BodyWriter;

/// `example.com` with `n` names `h<i>.example.com`, each with one A record ending in `tag`.
fn zone(n: usize, tag: u8) -> KernelData {
    let apex = wire("example.com");
    let node = |name: &[u8]| NodeEntry { name: name.to_vec(), apex: apex.clone(), cut: None, wildcard: false };
    let mut nx = BodyWriter::new(&apex).unwrap();
    nx.set_aa(true);
    nx.set_rcode(3);
    let mut data = KernelData { nodes: vec![node(&apex)], answers: vec![AnswerEntry { base: apex.clone(), kind: Kind::NxDomain, body: nx.finish() }] };
    for i in 0..n {
        let name = wire(&format!("h{i}.example.com"));
        let mut w = BodyWriter::new(&name).unwrap();
        w.set_aa(true);
        w.write_rr(&name, true, 1, 300, &[198, 18, (i >> 8) as u8, tag]).unwrap();
        data.nodes.push(node(&name));
        data.answers.push(AnswerEntry { base: name, kind: Kind::Type(1), body: w.finish() });
    }
    data
}

fn small_program() -> XdpProgram {
    let cfg = LoadConfig {
        listen: vec!["198.18.0.1:53".parse().unwrap()],
        edns_payload: OUR_PAYLOAD,
        seed: Some(0x5eed_0123_4567_89ab),
        // what a secondary without a stored copy starts with: sized for no zone at all
        capacity: Capacity::for_data(&KernelData::default()),
        resolver: None,
        guard: None,
        kit: None,
    };
    XdpProgram::load(&cfg).expect("load (verifier)")
}

fn ask(prog: &XdpProgram, name: &str) -> (u32, Vec<u8>) {
    prog.test_run(&frame(&Net::v4(), &query(&wire(name), 1, None))).unwrap()
}

fn answered(prog: &XdpProgram) -> u64 {
    prog.counters().unwrap().iter().find(|(n, _)| n == "answered").map_or(0, |c| c.1)
}

#[test]
fn grown_maps_take_data_that_did_not_fit() {
    require_root("grown_maps_take_data_that_did_not_fit");
    let mut prog = small_program();
    prog.install(&zone(10, 1)).unwrap();
    let (act, out) = ask(&prog, "h3.example.com");
    assert_eq!((act, *out.last().unwrap()), (3, 1), "the small zone answered in the kernel");
    let before = answered(&prog);
    let gen = prog.generation();
    let ids_before = prog.map_ids().unwrap();

    // 20,000 names: more nodes than the maps sized for no zone can take
    let big = zone(20_000, 2);
    let need = Capacity::for_data(&big);
    assert!(!prog.capacity().holds(&need), "the maps sized at load do not hold the big zone");
    assert!(prog.install(&big).is_err(), "the install into the small maps fails (E2BIG)");
    let (act, out) = ask(&prog, "h3.example.com");
    assert_eq!((act, *out.last().unwrap()), (3, 1), "a failed install leaves the old data answering");

    let to = prog.capacity().max(&need);
    prog.install_grown(&big, to).unwrap();
    assert!(prog.capacity().holds(&need));
    assert!(prog.generation() > gen, "generations go on rising: {} after {gen}", prog.generation());
    for i in [0usize, 3, 12_345, 19_999] {
        let (act, out) = ask(&prog, &format!("h{i}.example.com"));
        assert_eq!((act, *out.last().unwrap()), (3, 2), "h{i} answered from the grown maps");
    }
    let (in_table, left_out) = prog.table_counts();
    // as at start-up sizing: a few answers of full buckets live in the hash map, still in
    // the kernel
    assert_eq!(in_table + left_out, big.answers.len());
    assert!(left_out * 20 < big.answers.len(), "the grown answer table holds the zone: {in_table} in, {left_out} out");
    // the counters live in the reused scratch map: they go on from where they were
    assert_eq!(answered(&prog), before + 5, "verdict counters carried over");
    // every map but the zone maps is the old program's own
    let ids_after = prog.map_ids().unwrap();
    for (name, id) in &ids_before {
        let after = ids_after.iter().find(|(n, _)| n == name).map(|x| x.1);
        if name.contains('.') || ZONE_MAPS.contains(&name.as_str()) {
            assert_ne!(after, Some(*id), "{name} is made new");
        } else {
            assert_eq!(after, Some(*id), "{name} is reused");
        }
    }

    // it grows again (no shrink of what it holds), and a smaller reload installs in place
    prog.install(&zone(10, 3)).unwrap();
    let (act, out) = ask(&prog, "h3.example.com");
    assert_eq!((act, *out.last().unwrap()), (3, 3), "a smaller zone set fits the grown maps");
    assert!(prog.capacity().holds(&need), "growing never shrinks");
}
