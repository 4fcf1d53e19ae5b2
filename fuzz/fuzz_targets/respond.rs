//! Fuzz target: arbitrary bytes into `xdns_zone::respond` over the test zones; every response
//! must parse with `domain` and echo the ID (see `fuzz/check.rs`).
#![no_main]

use std::path::Path;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use xdns_zone::ZoneSet;

#[path = "../check.rs"]
mod check;

fn zones() -> &'static ZoneSet {
    static ZONES: OnceLock<ZoneSet> = OnceLock::new();
    ZONES.get_or_init(|| check::zones(&Path::new(env!("CARGO_MANIFEST_DIR")).join("..")))
}

fuzz_target!(|data: &[u8]| {
    check::check(zones(), data);
});
