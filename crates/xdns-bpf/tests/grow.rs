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

/// A grown program's zone maps are filled while its verifier has not run
/// (`XdpProgram::install_grown_stream`: the object's maps are made first, the verifier runs on
/// a thread of its own beside the fill). The verifier is held here until the fill has read its
/// last entry: an install that loads the program before it writes (the verifier, then the
/// fill, one after the other) never lets the fill get there while the verifier waits, and the
/// verifier is let go only after its bound, having seen no fill. Meanwhile the old program and
/// its data go on answering; the new data answers once both are done.
#[test]
fn grown_maps_are_filled_beside_the_verifier() {
    use std::sync::{mpsc, Arc, Mutex};
    require_root("grown_maps_are_filled_beside_the_verifier");
    let mut prog = small_program();
    prog.install(&zone(10, 1)).unwrap();
    let old_fd = prog.prog_fd().try_clone_to_owned().unwrap();
    let big = zone(20_000, 2);
    let to = prog.capacity().max(&Capacity::for_data(&big));

    let (written_tx, written_rx) = mpsc::channel::<()>();
    // what the held verifier saw: whether the fill had read every entry before it started
    let fill_first = Arc::new(Mutex::new(None::<bool>));
    let seen = fill_first.clone();
    let hook: Box<dyn FnOnce() + Send> = Box::new(move || {
        // a bound, not a measurement: an install that never fills before its verifier ends here
        let got = written_rx.recv_timeout(std::time::Duration::from_secs(120));
        *seen.lock().unwrap() = Some(got.is_ok());
    });
    // at the stream's end (every entry read by the loader), the old program still answers
    // from its own data, then the verifier is let go
    let old_answer = Arc::new(Mutex::new(None::<(u32, u8)>));
    let at_end = old_answer.clone();
    let mut tell = Some(written_tx);
    let mut src = xdns_bpf::maps::Stream::of(&big);
    let nodes = std::mem::replace(&mut src.nodes, Box::new(std::iter::empty()));
    src.nodes = Box::new(nodes.chain(std::iter::from_fn(move || {
        if let Some(tx) = tell.take() {
            let (act, out) = xdns_bpf::runtime::test_run_fd(std::os::fd::AsFd::as_fd(&old_fd), &frame(&Net::v4(), &query(&wire("h3.example.com"), 1, None))).unwrap();
            *at_end.lock().unwrap() = Some((act, *out.last().unwrap()));
            let _ = tx.send(());
        }
        None
    })));
    prog.install_grown_hooked(src, to, Some(hook)).unwrap();

    assert_eq!(*fill_first.lock().unwrap(), Some(true), "the verifier ran only after the fill had read every entry");
    assert_eq!(*old_answer.lock().unwrap(), Some((3, 1)), "the old program answered from its own data during the fill");
    assert!(prog.load_timing().fill.is_some(), "the grown program's load says it was filled beside the verifier");
    for i in [0usize, 3, 19_999] {
        let (act, out) = ask(&prog, &format!("h{i}.example.com"));
        assert_eq!((act, *out.last().unwrap()), (3, 2), "h{i} answered from the grown maps");
    }
    let (in_table, left_out) = prog.table_counts();
    assert_eq!(in_table + left_out, big.answers.len(), "every answer in the kernel");
}
