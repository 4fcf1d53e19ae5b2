//! The verdict names come from `bpf/xdns_abi.h` (build.rs reads the header): they must agree
//! with the enum the compiler put into the program's BTF (the skeleton's `xdns_verdict`).
//! Runs without root.

use xdns_bpf::types::xdns_verdict;
use xdns_bpf::{verdict_name, VERDICT_NAMES};

#[test]
fn verdict_names_match_the_programs_enum() {
    assert_eq!(VERDICT_NAMES.len(), xdns_verdict::XDNS_VERDICT_MAX.0 as usize);
    let spots = [
        (xdns_verdict::XDNS_ANSWERED, "answered"),
        (xdns_verdict::XDNS_PASS_DNS_RESPONSE, "pass_dns_response"),
        (xdns_verdict::XDNS_PASS_NO_ZONE, "pass_no_zone"),
        (xdns_verdict::XDNS_CACHE_ANSWERED, "cache_answered"),
        (xdns_verdict::XDNS_DROP_CACHE_RACE, "drop_cache_race"),
    ];
    for (v, name) in spots {
        assert_eq!(verdict_name(v.0 as usize).as_deref(), Some(name));
    }
    assert_eq!(verdict_name(VERDICT_NAMES.len()), None);
}
