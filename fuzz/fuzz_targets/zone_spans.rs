//! Fuzz target: arbitrary bytes as master-file text, through the zone loader's pre-scanner
//! (the entries and their lines); every span must be consistent with the text (see
//! `fuzz/check_spans.rs`).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../check_spans.rs"]
mod check_spans;

fuzz_target!(|data: &[u8]| {
    check_spans::check(data);
});
