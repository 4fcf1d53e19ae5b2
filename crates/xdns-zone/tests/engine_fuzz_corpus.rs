//! Replays the seed corpus of the `respond` fuzz target (`fuzz/corpus/respond/`) through the
//! same checks as the fuzzer, in plain `cargo test` (no nightly needed). Also runs simple
//! mutations of every seed (truncations and single-byte flips) to cover the neighbourhood of
//! each real query.

use std::path::Path;

#[path = "../../../fuzz/check.rs"]
mod check;

fn repo_root() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[path = "../../../fuzz/read_corpus.rs"]
mod read_corpus;

fn corpus() -> Vec<(String, Vec<u8>)> {
    read_corpus::corpus("respond")
}

#[test]
fn corpus_replays_clean() {
    let zones = check::zones(&repo_root());
    let seeds = corpus();
    assert!(seeds.len() >= 30, "only {} seeds", seeds.len());
    for (name, data) in &seeds {
        let r = std::panic::catch_unwind(|| check::check(&zones, data));
        assert!(r.is_ok(), "seed {name} failed");
    }
}

#[test]
fn corpus_mutations_replay_clean() {
    let zones = check::zones(&repo_root());
    let mut n = 0usize;
    for (name, data) in corpus() {
        for cut in 0..data.len() {
            check::check(&zones, &data[..cut]);
            n += 1;
        }
        for i in 0..data.len() {
            for x in [0x01u8, 0x80, 0xff, 0x3f, 0xc0] {
                let mut m = data.clone();
                m[i] ^= x;
                let r = std::panic::catch_unwind(|| check::check(&zones, &m));
                assert!(r.is_ok(), "seed {name}: byte {i} ^ {x:#x}");
                n += 1;
            }
        }
    }
    assert!(n > 1000, "{n} mutations");
}
