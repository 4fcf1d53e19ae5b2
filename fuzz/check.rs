//! The checks every fuzz input must pass, shared by the cargo-fuzz target
//! (`fuzz/fuzz_targets/respond.rs`) and the corpus replay test
//! (`crates/xdns-zone/tests/engine_fuzz_corpus.rs`, plain `cargo test`).

use std::path::Path;
use std::sync::Arc;

use domain::base::{Message, ParsedName};
use domain::rdata::AllRecordData;
use xdns_zone::{load_zone, respond, Outcome, RespondConfig, Transport, ZoneSet, ZoneSource};

/// The zones the fuzzer answers from: tests/zones/example.com and example.net.
pub fn zones(repo_root: &Path) -> ZoneSet {
    let mut set = ZoneSet::default();
    for apex in ["example.com.", "example.net."] {
        let src = ZoneSource {
            name: apex.into(),
            file: repo_root.join("tests/zones").join(format!("{apex}zone")),
        };
        let z = load_zone(&src, None).unwrap_or_else(|e| panic!("{apex}: {e:?}"));
        set.zones.insert(z.apex.clone(), Arc::new(z));
    }
    set
}

/// Runs `input` through `respond` over UDP and TCP and checks the result: a dropped message
/// leaves `out` empty; an answer parses with `domain` (header, question, every record and its
/// RDATA), echoes the ID, has QR=1, and respects the size limit of its transport.
/// Panics (with a reason) on any violation.
pub fn check(zones: &ZoneSet, input: &[u8]) {
    let cfg = RespondConfig::default();
    let mut out = Vec::new();
    for transport in [Transport::Udp, Transport::Tcp] {
        let outcome = respond(zones, input, transport, &cfg, &mut out);
        match outcome {
            Outcome::Dropped(_) => assert!(out.is_empty(), "dropped but wrote {} bytes", out.len()),
            Outcome::Answered { rcode, truncated, .. } => {
                let limit = match transport {
                    Transport::Tcp => 65535,
                    Transport::Udp => cfg.edns_payload.max(512) as usize,
                };
                assert!(out.len() <= limit, "{} bytes over {transport:?}", out.len());
                assert!(out.len() >= 12);
                assert_eq!(out[..2], input[..2], "ID not echoed");
                let msg = Message::from_octets(out.clone()).expect("response does not parse");
                assert!(msg.header().qr(), "QR not set");
                assert_eq!(msg.header().tc(), truncated, "TC differs from outcome");
                let full = msg.opt_rcode().to_int();
                if msg.opt().is_some() {
                    assert_eq!(full, rcode, "RCODE differs from outcome");
                } else {
                    assert_eq!(msg.header().rcode().to_int() as u16, rcode, "RCODE differs");
                }
                assert!(msg.header_counts().qdcount() <= 1);
                for q in msg.question() {
                    q.expect("question does not parse");
                }
                let mut opts = 0;
                for section in [msg.answer(), msg.authority(), msg.additional()] {
                    for rr in section.expect("section does not parse") {
                        let rr = rr.expect("record header does not parse");
                        if rr.rtype() == domain::base::Rtype::OPT {
                            opts += 1;
                        }
                        rr.into_record::<AllRecordData<_, ParsedName<_>>>()
                            .expect("record data does not parse");
                    }
                }
                assert!(opts <= 1, "{opts} OPT records");
            }
        }
    }
}
