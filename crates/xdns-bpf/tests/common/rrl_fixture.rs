//! The RRL gate's fixture, shared by tests/rrl.rs and examples/rrl_gate.rs (each includes it
//! with `#[path]`, beside `common`): the zone both answer from, the frame shapes of a client,
//! the server secret and the COOKIE options built from it.
#![allow(dead_code)]

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;

use crate::common::{Net, Opt};
use xdns_guard::cookies::server_cookie;
use xdns_zone::{load_zone, ZoneSet, ZoneSource};

/// The server cookie secret of the fixtures.
pub const SECRET: [u8; 16] = *b"0123456789abcdef";

/// tests/zones/example.com.zone, alone.
pub fn zones() -> ZoneSet {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/zones");
    let mut set = ZoneSet::default();
    let z = load_zone(&ZoneSource { name: "example.com.".into(), file: dir.join("example.com.zone") }, None).unwrap();
    set.zones.insert(z.apex.clone(), Arc::new(z));
    set
}

/// The frame shape `shape` ("ipv4", "ipv6", "vlan": IPv4 behind an 802.1Q tag 42) from client
/// `src` (v4 or v6 address text).
pub fn net(shape: &str, src: &str) -> Net {
    let ip: IpAddr = src.parse().unwrap();
    let mut n = match ip {
        IpAddr::V4(a) => Net { src: a.octets().to_vec(), ..Net::v4() },
        IpAddr::V6(a) => Net { src: a.octets().to_vec(), ..Net::v6() },
    };
    if shape == "vlan" {
        n.vlan = Some((0x8100, 42));
    }
    n
}

/// An OPT (payload 1232) with one COOKIE option of `data`.
pub fn cookie_opt(data: &[u8]) -> Option<Opt> {
    let mut o = Opt::new(1232, false).unwrap();
    o.options = [&[0u8, 10][..], &(data.len() as u16).to_be_bytes()].concat();
    o.options.extend_from_slice(data);
    Some(o)
}

/// Client cookie `client` followed by the server cookie `secret` makes for it and `src` at `at`.
pub fn client_and_server_cookie(secret: &[u8; 16], client: &[u8; 8], src: &str, at: u32) -> Vec<u8> {
    let mut c = client.to_vec();
    c.extend_from_slice(&server_cookie(secret, client, src.parse().unwrap(), at));
    c
}
