//! Replays the seed corpus of the `zone_spans` fuzz target (`fuzz/corpus/zone_spans/`) through
//! the same checks as the fuzzer, in plain `cargo test` (no nightly needed). Also runs simple
//! mutations of every seed (truncations and single-byte changes into the characters the
//! pre-scanner treats specially) to cover the neighbourhood of each real master file.


#[path = "../../../fuzz/check_spans.rs"]
mod check_spans;

#[path = "../../../fuzz/read_corpus.rs"]
mod read_corpus;

fn corpus() -> Vec<(String, Vec<u8>)> {
    read_corpus::corpus("zone_spans")
}

#[test]
fn corpus_replays_clean() {
    let seeds = corpus();
    assert!(seeds.len() >= 15, "only {} seeds", seeds.len());
    let mut spans = 0;
    for (name, data) in &seeds {
        let r = std::panic::catch_unwind(|| check_spans::check(data));
        assert!(r.is_ok(), "seed {name} failed");
        spans += xdns_zone::load::entry_spans(data).count();
    }
    // The seeds are real master files: a scanner that found no entry would pass the checks.
    assert!(spans >= seeds.len(), "only {spans} spans in {} seeds", seeds.len());
}

#[test]
fn corpus_mutations_replay_clean() {
    let mut n = 0usize;
    for (name, data) in corpus() {
        for cut in 0..data.len() {
            let r = std::panic::catch_unwind(|| check_spans::check(&data[..cut]));
            assert!(r.is_ok(), "seed {name} cut at {cut}");
            n += 1;
        }
        for i in 0..data.len() {
            for c in [b'\n', b'"', b'\\', b';', b'(', b')', b'$', b' ', 0xff] {
                let mut m = data.clone();
                m[i] = c;
                let r = std::panic::catch_unwind(|| check_spans::check(&m));
                assert!(r.is_ok(), "seed {name}: byte {i} = {c:#x}");
                n += 1;
            }
        }
    }
    assert!(n > 1000, "{n} mutations");
}
