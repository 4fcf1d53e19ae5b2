//! Fuzz target: arbitrary bytes as an upstream reply, through the resolver's reply parser,
//! acceptance check and classifier; what they return must hold together (see
//! `fuzz/check_reply.rs`).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../check_reply.rs"]
mod check_reply;

fuzz_target!(|data: &[u8]| {
    check_reply::check(data);
});
