//! Atomic reload in the kernel (needs root): generation A answers until generation B is
//! flipped in; while another thread queries continuously and the data is reloaded many times,
//! every packet is answered from exactly one generation and none misses an entry.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use common::*;
use xdns_bpf::data::{AnswerEntry, KernelData, Kind, NodeEntry};
use xdns_bpf::runtime::test_run_fd;
use xdns_wire::body::BodyWriter;

/// A zone where www has one A record whose address ends in `tag`, and one TXT at `t<tag>`.
fn zone(tag: u8) -> KernelData {
    let apex = wire("example.com");
    let www = wire("www.example.com");
    let node = |n: &[u8]| NodeEntry { name: n.to_vec(), apex: apex.clone(), cut: None, wildcard: false };
    let mut w = BodyWriter::new(&www).unwrap();
    w.set_aa(true);
    w.write_rr(&www, true, 1, 300, &[198, 18, 1, tag]).unwrap();
    let mut nx = BodyWriter::new(&apex).unwrap();
    nx.set_aa(true);
    nx.set_rcode(3);
    KernelData {
        nodes: vec![node(&apex), node(&www)],
        answers: vec![
            AnswerEntry { base: www.clone(), kind: Kind::Type(1), body: w.finish() },
            AnswerEntry { base: apex.clone(), kind: Kind::NxDomain, body: nx.finish() },
        ],
    }
}

/// The last address byte of the A record in a reply frame.
fn answered_tag(out: &[u8]) -> u8 {
    *out.last().unwrap()
}

#[test]
fn flip_is_atomic() {
    require_root("flip_is_atomic");
    let mut prog = load();
    let f = frame(&Net::v4(), &query(&wire("www.example.com"), 1, None));
    prog.install(&zone(0xA)).unwrap();
    let (act, out) = prog.test_run(&f).unwrap();
    assert_eq!((act, answered_tag(&out)), (3, 0xA));
    // both answers and both nodes in the answer table, none in the hash maps (class S: no
    // body map either)
    assert_eq!((prog.map_entries(), prog.table_counts(), prog.node_counts()), ((0, 0, 0), (2, 0), (2, 0)));
    // the answer table's pages: one array per live generation (generation 1: odd parity)
    let arrays = |p: &xdns_bpf::runtime::XdpProgram| p.val_page_arrays().unwrap().map(|a| a.is_some());
    assert_eq!(arrays(&prog), [false, true], "one page array between reloads");
    let first = prog.val_page_arrays().unwrap()[1];
    let staged = prog.stage(&zone(0xB)).unwrap();
    assert_eq!(prog.map_entries(), (0, 0, 0), "both generations while staged, in their tables");
    assert_eq!(arrays(&prog), [true, true], "both generations' page arrays while staged");
    let (act, out) = prog.test_run(&f).unwrap();
    assert_eq!((act, answered_tag(&out)), (3, 0xA), "generation B written but not flipped");
    prog.commit(staged).unwrap();
    let (act, out) = prog.test_run(&f).unwrap();
    assert_eq!((act, answered_tag(&out)), (3, 0xB), "flipped");
    assert_eq!(prog.map_entries(), (0, 0, 0), "old generation deleted");
    assert_eq!(arrays(&prog), [true, false], "the old generation's page array dropped");
    // a third generation takes a new array in the first one's slot, answered from it
    prog.install(&zone(0xC)).unwrap();
    let third = prog.val_page_arrays().unwrap()[1];
    assert!(third.is_some() && third != first, "a new array per generation: {first:?} then {third:?}");
    let (act, out) = prog.test_run(&f).unwrap();
    assert_eq!((act, answered_tag(&out)), (3, 0xC));
    prog.retire().unwrap();
    assert_eq!(arrays(&prog), [false, false], "no page array once retired");
    let (act, _) = prog.test_run(&f).unwrap();
    assert_eq!(act, 2, "retired: the query passes to userspace");
}

#[test]
fn reload_under_load() {
    require_root("reload_under_load");
    let mut prog = load();
    prog.install(&zone(1)).unwrap();
    let f = frame(&Net::v4(), &query(&wire("www.example.com"), 1, None));
    let stop = AtomicBool::new(false);
    let runs = AtomicU64::new(0);
    let fd = prog.prog_fd().try_clone_to_owned().unwrap();
    let seen = std::thread::scope(|s| {
        let h = s.spawn(|| {
            let mut seen = std::collections::BTreeMap::<u8, u32>::new();
            while !stop.load(Ordering::Relaxed) {
                use std::os::fd::AsFd;
                let (act, out) = test_run_fd(fd.as_fd(), &f).unwrap();
                assert_eq!(act, 3, "every packet answered during reloads");
                *seen.entry(answered_tag(&out)).or_default() += 1;
                runs.fetch_add(1, Ordering::Relaxed);
            }
            seen
        });
        for g in 2..=60u8 {
            // let the querying thread run between reloads, and during them
            let at = runs.load(Ordering::Relaxed);
            while runs.load(Ordering::Relaxed) < at + 50 {
                std::thread::yield_now();
            }
            prog.install(&zone(g)).unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        h.join().unwrap()
    });
    let c = prog.counters().unwrap();
    let misses: u64 = c.iter().filter(|(n, _)| n != "answered").map(|x| x.1).sum();
    println!("reload: 59 reloads, answers by generation {seen:?}, other verdicts {misses}");
    assert_eq!(misses, 0);
    assert!(seen.keys().all(|t| (1..=60).contains(t)));
    let (_, out) = prog.test_run(&f).unwrap();
    assert_eq!(answered_tag(&out), 60);
    assert_eq!((prog.map_entries(), prog.node_counts()), ((0, 0, 0), (2, 0)), "only the active generation is left");
}

/// A synthetic zone of 100,000 names with one A body each installs, reloads (new generation
/// written, flipped, old deleted) and answers for its last name; the times are printed for
/// reading only (performance claims live in the benchmark).
#[test]
fn install_and_reload_100k_names() {
    require_root("install_and_reload_100k_names");
    let apex = wire("example.com");
    let n = 100_000u32;
    let mut data = KernelData {
        nodes: vec![NodeEntry { name: apex.clone(), apex: apex.clone(), cut: None, wildcard: false }],
        answers: vec![],
    };
    for i in 0..n {
        let name = wire(&format!("h{i}.example.com"));
        let mut w = BodyWriter::new(&name).unwrap();
        w.set_aa(true);
        w.write_rr(&name, true, 1, 300, &i.to_be_bytes()).unwrap();
        data.nodes.push(NodeEntry { name: name.clone(), apex: apex.clone(), cut: None, wildcard: false });
        data.answers.push(AnswerEntry { base: name, kind: Kind::Type(1), body: w.finish() });
    }
    let cfg = xdns_bpf::runtime::LoadConfig {
        listen: vec!["198.18.0.1:53".parse().unwrap()],
        edns_payload: OUR_PAYLOAD,
        seed: None,
        capacity: xdns_bpf::runtime::Capacity::for_data(&data),
        resolver: None,
        guard: None,
        kit: None,
    };
    let mut prog = xdns_bpf::runtime::XdpProgram::load(&cfg).unwrap();
    let t = std::time::Instant::now();
    prog.install(&data).unwrap();
    let first = t.elapsed();
    let t = std::time::Instant::now();
    prog.install(&data).unwrap();
    println!("install {n} names: first {first:?}, reload (write new + flip + delete old) {:?}", t.elapsed());
    let names = n as usize + 1;
    // the hash map holds the answers left out of the table (full buckets) only
    let (in_table, left_out) = prog.table_counts();
    assert!(in_table + left_out == n as usize && left_out < n as usize / 20, "{in_table} + {left_out}");
    // so does `xdns_nodes` the nodes (written after the answers, they meet the fuller buckets:
    // more of them are left out)
    let (nodes_in_table, nodes_left_out) = prog.node_counts();
    assert!(nodes_in_table + nodes_left_out == names && nodes_left_out < names / 10, "{nodes_in_table} + {nodes_left_out}");
    assert_eq!(prog.map_entries(), (nodes_left_out, left_out, left_out), "only the new generation is left");
    let last = frame(&Net::v4(), &query(&wire(&format!("h{}.example.com", n - 1)), 1, None));
    let (act, out) = prog.test_run(&last).unwrap();
    assert_eq!(act, 3, "XDP_TX");
    assert_eq!(out[out.len() - 4..], (n - 1).to_be_bytes(), "the A record of the last name");
}

/// The fill writes the answer table (its records, then its index) and the presence filter
/// through a window of each array mapped into the process, a few MiB at a time
/// (`xdns_bpf::window`): a zone whose records, index and filter span several windows (records
/// of many lengths, so they straddle window and page boundaries at every offset) answers every
/// name with its own bytes, in both parities (the second install writes the other half of the
/// filter, at its offset, and new arrays), and the page arrays it writes are mmapable.
#[test]
fn fill_through_mapped_windows_answers_every_name() {
    require_root("fill_through_mapped_windows_answers_every_name");
    const SEED: u64 = 0x0dd5_eed5_0f11_1111;
    let apex = wire("example.com");
    let n = 150_000u32;
    let text = |i: u32, tag: u8| vec![b'a' + (i as u8).wrapping_add(tag) % 26; ((i + u32::from(tag)) % 90) as usize];
    let zone = |tag: u8| {
        let mut data = KernelData {
            nodes: vec![NodeEntry { name: apex.clone(), apex: apex.clone(), cut: None, wildcard: false }],
            answers: vec![],
        };
        for i in 0..n {
            let name = wire(&format!("t{i}.example.com"));
            let t = text(i, tag);
            let mut w = BodyWriter::new(&name).unwrap();
            w.set_aa(true);
            w.write_rr(&name, true, 16, 300, &[&[t.len() as u8][..], &t].concat()).unwrap();
            data.nodes.push(NodeEntry { name: name.clone(), apex: apex.clone(), cut: None, wildcard: false });
            data.answers.push(AnswerEntry { base: name, kind: Kind::Type(16), body: w.finish() });
        }
        data
    };
    let cfg = xdns_bpf::runtime::LoadConfig {
        listen: vec!["198.18.0.1:53".parse().unwrap()],
        edns_payload: OUR_PAYLOAD,
        seed: Some(SEED),
        capacity: xdns_bpf::runtime::Capacity::for_data(&zone(0)),
        resolver: None,
        guard: None,
        kit: None,
    };
    let mut prog = xdns_bpf::runtime::XdpProgram::load(&cfg).unwrap();
    let (buckets, bytes) = prog.table_shape();
    let window = 1 << 20; // the fill's window (xdns_bpf::window::WINDOW)
    assert!(bytes > 3 * window && buckets * 64 > window, "the table spans several windows: {buckets} buckets, {bytes} bytes");
    for (gen, tag) in [(1u32, 0x11u8), (2, 0x22)] {
        prog.install(&zone(tag)).unwrap();
        let (in_table, left_out) = prog.table_counts();
        assert!(in_table + left_out == n as usize && left_out < n as usize / 20, "{in_table} + {left_out}");
        let filter = prog.filter(gen).unwrap();
        for i in 0..n {
            let name = wire(&format!("t{i}.example.com"));
            assert!(filter.maybe(xdns_bpf::hash::name_hash(SEED, &name), xdns_bpf::hash::FILTER_NODE), "generation {gen}: node bit of t{i}");
            let (act, out) = prog.test_run(&frame(&Net::v4(), &query(&name, 16, None))).unwrap();
            let t = text(i, tag);
            assert_eq!(act, 3, "generation {gen}: t{i} answered (XDP_TX)");
            assert_eq!(out[out.len() - t.len() - 1..], [&[t.len() as u8][..], &t].concat()[..], "generation {gen}: the TXT of t{i}");
        }
    }
    for id in prog.val_page_arrays().unwrap().into_iter().flatten() {
        use libbpf_rs::MapCore as _;
        let info = libbpf_rs::MapHandle::from_map_id(id).unwrap().info().unwrap();
        assert_ne!(info.info.map_flags & libbpf_sys::BPF_F_MMAPABLE, 0, "page array {id} is mmapable");
    }
}
