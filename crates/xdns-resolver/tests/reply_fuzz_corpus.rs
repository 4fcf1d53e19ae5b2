//! Replays the seed corpus of the `reply` fuzz target (`fuzz/corpus/reply/`) through the same
//! checks as the fuzzer, in plain `cargo test` (no nightly needed). Also runs simple mutations
//! of every seed (truncations and single-byte flips) to cover the neighbourhood of each real
//! reply.


use xdns_resolver::msg::parse_reply;
use xdns_resolver::resolve::{classify, Class};

#[path = "../../../fuzz/check_reply.rs"]
mod check_reply;

#[path = "../../../fuzz/read_corpus.rs"]
mod read_corpus;

fn corpus() -> Vec<(String, Vec<u8>)> {
    read_corpus::corpus("reply")
}

#[test]
fn corpus_replays_clean() {
    let seeds = corpus();
    assert!(seeds.len() >= 20, "only {} seeds", seeds.len());
    let mut parsed = 0;
    let mut classes = std::collections::BTreeSet::new();
    for (name, data) in &seeds {
        let r = std::panic::catch_unwind(|| check_reply::check(data));
        assert!(r.is_ok(), "seed {name} failed");
        let Some(reply) = parse_reply(data) else { continue };
        parsed += 1;
        let q = reply.qname.to_ascii_lowercase();
        for p in xdns_wire::name::suffix_offsets(&q) {
            classes.insert(match classify(&reply, &q, reply.qtype, &q[p..], 8) {
                Class::Answer(_) => "answer",
                Class::NxDomain(_) => "nxdomain",
                Class::NoData(_) => "nodata",
                Class::Referral { .. } => "referral",
                Class::Lame => "lame",
            });
        }
    }
    // Most seeds are real replies, of every class: a parser that refused everything, or a
    // classifier that found nothing, would pass the checks.
    assert!(parsed * 2 > seeds.len(), "only {parsed} of {} seeds parse", seeds.len());
    assert_eq!(classes.len(), 5, "classes seen: {classes:?}");
}

#[test]
fn corpus_mutations_replay_clean() {
    let mut n = 0usize;
    for (name, data) in corpus() {
        for cut in 0..data.len() {
            let r = std::panic::catch_unwind(|| check_reply::check(&data[..cut]));
            assert!(r.is_ok(), "seed {name} cut at {cut}");
            n += 1;
        }
        for i in 0..data.len() {
            for x in [0x01u8, 0x80, 0xff, 0x3f, 0xc0] {
                let mut m = data.clone();
                m[i] ^= x;
                let r = std::panic::catch_unwind(|| check_reply::check(&m));
                assert!(r.is_ok(), "seed {name}: byte {i} ^ {x:#x}");
                n += 1;
            }
        }
    }
    assert!(n > 1000, "{n} mutations");
}
