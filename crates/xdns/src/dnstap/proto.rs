//! The dnstap protobuf message (the `Dnstap` and `Message` types of dnstap.proto, the
//! fields xdns fills), encoded by hand.
//!
//! Why not `prost`: xdns writes one fixed message shape and never parses dnstap in the
//! daemon; the whole encoder is varints, lengths and a dozen field tags, while `prost`
//! brings a derive macro (or `protoc` at build time) and an allocation per message for
//! its structs. The encoding is checked against [`decode`] here (a small protobuf reader,
//! used by the tests) and against a real dnstap reader (`kdig -G`) in
//! tests/system/test_dnstap.py.
//!
//! Field numbers (dnstap.proto): `Dnstap { identity = 1; version = 2; message = 14;
//! type = 15 (MESSAGE = 1) }`, `Message { type = 1; socket_family = 2; socket_protocol =
//! 3; query_address = 4; response_address = 5; query_port = 6; response_port = 7;
//! query_time_sec = 8; query_time_nsec = 9 (fixed32); query_message = 10;
//! response_time_sec = 12; response_time_nsec = 13 (fixed32); response_message = 14 }`.

use std::net::{IpAddr, SocketAddr};
use std::time::{SystemTime, UNIX_EPOCH};

/// `Message.Type`: who sent the message to whom.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// A query received by the authoritative server.
    AuthQuery = 1,
    /// The authoritative server's response.
    AuthResponse = 2,
    /// A query the resolver sent upstream.
    ResolverQuery = 3,
    /// An upstream server's response to the resolver.
    ResolverResponse = 4,
    /// A query received by the resolver from a client.
    ClientQuery = 5,
    /// The resolver's response to its client.
    ClientResponse = 6,
}

impl Kind {
    /// A query (the message goes in `query_message`), else a response.
    pub fn is_query(self) -> bool {
        (self as u8) % 2 == 1
    }
}

/// `SocketProtocol`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Proto {
    Udp = 1,
    Tcp = 2,
}

impl From<xdns_zone::Transport> for Proto {
    fn from(t: xdns_zone::Transport) -> Self {
        match t {
            xdns_zone::Transport::Udp => Proto::Udp,
            xdns_zone::Transport::Tcp => Proto::Tcp,
        }
    }
}

/// One message to log. `query_addr` is the initiator's (the client's, or the resolver's own
/// for [`Kind::ResolverQuery`]/[`Kind::ResolverResponse`]), `response_addr` the responder's.
#[derive(Clone, Copy, Debug)]
pub struct Message<'a> {
    pub kind: Kind,
    pub proto: Proto,
    pub query_addr: Option<SocketAddr>,
    pub response_addr: Option<SocketAddr>,
    /// The DNS message as on the wire (without the TCP length prefix).
    pub wire: &'a [u8],
    /// When it was received (a query) or sent (a response).
    pub time: SystemTime,
    /// For a response, when its query was received, if known.
    pub query_time: Option<SystemTime>,
}

fn varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn tag(field: u32, wire_type: u8, out: &mut Vec<u8>) {
    varint(u64::from(field) << 3 | u64::from(wire_type), out);
}

fn uint(field: u32, v: u64, out: &mut Vec<u8>) {
    tag(field, 0, out);
    varint(v, out);
}

fn bytes(field: u32, b: &[u8], out: &mut Vec<u8>) {
    tag(field, 2, out);
    varint(b.len() as u64, out);
    out.extend_from_slice(b);
}

fn fixed32(field: u32, v: u32, out: &mut Vec<u8>) {
    tag(field, 5, out);
    out.extend_from_slice(&v.to_le_bytes());
}

/// Seconds and nanoseconds since the epoch (0 for a time before it).
fn split(t: SystemTime) -> (u64, u32) {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    (d.as_secs(), d.subsec_nanos())
}

/// The address bytes dnstap wants: 4 for IPv4, 16 for IPv6 (an IPv4-mapped IPv6 address
/// as IPv4).
fn addr_bytes(ip: IpAddr, buf: &mut [u8; 16]) -> &[u8] {
    match ip {
        IpAddr::V4(a) => {
            buf[..4].copy_from_slice(&a.octets());
            &buf[..4]
        }
        IpAddr::V6(a) => match a.to_ipv4_mapped() {
            Some(v4) => {
                buf[..4].copy_from_slice(&v4.octets());
                &buf[..4]
            }
            None => {
                *buf = a.octets();
                &buf[..]
            }
        },
    }
}

fn is_v4(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(_) => true,
        IpAddr::V6(a) => a.to_ipv4_mapped().is_some(),
    }
}

/// Append the `Dnstap` message for `m` to `out`.
pub fn encode(identity: &[u8], version: &[u8], m: &Message<'_>, out: &mut Vec<u8>) {
    if !identity.is_empty() {
        bytes(1, identity, out);
    }
    if !version.is_empty() {
        bytes(2, version, out);
    }
    // Message (field 14): written in place, its length put in front once known
    let start = out.len();
    uint(1, m.kind as u64, out);
    if let Some(ip) = m.query_addr.or(m.response_addr).map(|a| a.ip()) {
        uint(2, if is_v4(ip) { 1 } else { 2 }, out);
    }
    uint(3, m.proto as u64, out);
    let mut buf = [0u8; 16];
    if let Some(a) = m.query_addr {
        bytes(4, addr_bytes(a.ip(), &mut buf), out);
    }
    if let Some(a) = m.response_addr {
        bytes(5, addr_bytes(a.ip(), &mut buf), out);
    }
    if let Some(a) = m.query_addr {
        uint(6, u64::from(a.port()), out);
    }
    if let Some(a) = m.response_addr {
        uint(7, u64::from(a.port()), out);
    }
    let query_time = if m.kind.is_query() { Some(m.time) } else { m.query_time };
    if let Some(t) = query_time {
        let (s, ns) = split(t);
        uint(8, s, out);
        fixed32(9, ns, out);
    }
    if m.kind.is_query() {
        bytes(10, m.wire, out);
    } else {
        let (s, ns) = split(m.time);
        uint(12, s, out);
        fixed32(13, ns, out);
        bytes(14, m.wire, out);
    }
    let mut head = Vec::with_capacity(4);
    tag(14, 2, &mut head);
    varint((out.len() - start) as u64, &mut head);
    out.splice(start..start, head);
    uint(15, 1, out); // Dnstap.Type MESSAGE
}

/// One decoded protobuf field value.
#[cfg(test)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    Varint(u64),
    Fixed32(u32),
    Fixed64(u64),
    Bytes(Vec<u8>),
}

/// The fields of one protobuf message, in order: `None` when it is malformed (a truncated
/// field, an unknown wire type). For tests; the daemon never parses dnstap.
#[cfg(test)]
pub fn decode(mut b: &[u8]) -> Option<Vec<(u32, Value)>> {
    fn read_varint(b: &mut &[u8]) -> Option<u64> {
        let mut v = 0u64;
        for i in 0..10 {
            let (&byte, rest) = b.split_first()?;
            *b = rest;
            v |= u64::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                return Some(v);
            }
        }
        None
    }
    let mut fields = Vec::new();
    while !b.is_empty() {
        let key = read_varint(&mut b)?;
        let field = u32::try_from(key >> 3).ok()?;
        let value = match key & 7 {
            0 => Value::Varint(read_varint(&mut b)?),
            1 => {
                let (v, rest) = b.split_first_chunk::<8>()?;
                b = rest;
                Value::Fixed64(u64::from_le_bytes(*v))
            }
            2 => {
                let len = usize::try_from(read_varint(&mut b)?).ok()?;
                if len > b.len() {
                    return None;
                }
                let (v, rest) = b.split_at(len);
                b = rest;
                Value::Bytes(v.to_vec())
            }
            5 => {
                let (v, rest) = b.split_first_chunk::<4>()?;
                b = rest;
                Value::Fixed32(u32::from_le_bytes(*v))
            }
            _ => return None,
        };
        fields.push((field, value));
    }
    Some(fields)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn get(fields: &[(u32, Value)], n: u32) -> Option<&Value> {
        fields.iter().find(|(f, _)| *f == n).map(|(_, v)| v)
    }

    #[test]
    fn varints_as_protobuf_writes_them() {
        for (v, want) in [(0u64, &[0u8][..]), (1, &[1]), (127, &[0x7f]), (128, &[0x80, 1]), (300, &[0xac, 2]), (55142, &[0xe6, 0xae, 3])] {
            let mut out = Vec::new();
            varint(v, &mut out);
            assert_eq!(out, want, "{v}");
        }
    }

    /// A query and a response, each decoded back field by field.
    #[test]
    fn a_message_decodes_back_to_what_was_logged() {
        let t = UNIX_EPOCH + Duration::new(1_609_664_398, 355_231_260);
        let wire = [0x12u8, 0x34, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1];
        let client: SocketAddr = "198.18.0.2:55142".parse().unwrap();
        let server: SocketAddr = "198.18.0.1:53".parse().unwrap();
        let m = Message { kind: Kind::AuthQuery, proto: Proto::Udp, query_addr: Some(client), response_addr: Some(server), wire: &wire, time: t, query_time: None };
        let mut out = Vec::new();
        encode(b"ns1", b"xdns 0.1", &m, &mut out);
        let top = decode(&out).unwrap();
        assert_eq!(get(&top, 1), Some(&Value::Bytes(b"ns1".to_vec())));
        assert_eq!(get(&top, 2), Some(&Value::Bytes(b"xdns 0.1".to_vec())));
        assert_eq!(get(&top, 15), Some(&Value::Varint(1)));
        let Some(Value::Bytes(inner)) = get(&top, 14) else { panic!("no message: {top:?}") };
        let f = decode(inner).unwrap();
        assert_eq!(get(&f, 1), Some(&Value::Varint(1)));
        assert_eq!(get(&f, 2), Some(&Value::Varint(1)));
        assert_eq!(get(&f, 3), Some(&Value::Varint(1)));
        assert_eq!(get(&f, 4), Some(&Value::Bytes(vec![198, 18, 0, 2])));
        assert_eq!(get(&f, 5), Some(&Value::Bytes(vec![198, 18, 0, 1])));
        assert_eq!(get(&f, 6), Some(&Value::Varint(55142)));
        assert_eq!(get(&f, 7), Some(&Value::Varint(53)));
        assert_eq!(get(&f, 8), Some(&Value::Varint(1_609_664_398)));
        assert_eq!(get(&f, 9), Some(&Value::Fixed32(355_231_260)));
        assert_eq!(get(&f, 10), Some(&Value::Bytes(wire.to_vec())));
        assert_eq!(get(&f, 14), None);

        // a response over TCP/IPv6 with its query's time: response fields, both times
        let client: SocketAddr = "[2001:db8::2]:40000".parse().unwrap();
        let server: SocketAddr = "[2001:db8::1]:53".parse().unwrap();
        let later = t + Duration::from_micros(25);
        let m = Message { kind: Kind::ClientResponse, proto: Proto::Tcp, query_addr: Some(client), response_addr: Some(server), wire: &wire, time: later, query_time: Some(t) };
        let mut out = Vec::new();
        encode(b"", b"", &m, &mut out);
        let top = decode(&out).unwrap();
        assert_eq!(get(&top, 1), None, "an empty identity is left out");
        let Some(Value::Bytes(inner)) = get(&top, 14) else { panic!() };
        let f = decode(inner).unwrap();
        assert_eq!(get(&f, 1), Some(&Value::Varint(6)));
        assert_eq!(get(&f, 2), Some(&Value::Varint(2)));
        assert_eq!(get(&f, 3), Some(&Value::Varint(2)));
        assert_eq!(get(&f, 4), Some(&Value::Bytes("2001:db8::2".parse::<std::net::Ipv6Addr>().unwrap().octets().to_vec())));
        assert_eq!(get(&f, 8), Some(&Value::Varint(1_609_664_398)));
        assert_eq!(get(&f, 12), Some(&Value::Varint(1_609_664_398)));
        assert_eq!(get(&f, 13), Some(&Value::Fixed32(355_256_260)));
        assert_eq!(get(&f, 14), Some(&Value::Bytes(wire.to_vec())));
        assert_eq!(get(&f, 10), None);
    }

    /// A message too long for a one-byte length still frames right (a two- or three-byte
    /// varint length moved in front of it).
    #[test]
    fn long_messages_get_multi_byte_lengths() {
        let wire = vec![0xabu8; 5000];
        let m = Message { kind: Kind::AuthResponse, proto: Proto::Tcp, query_addr: None, response_addr: None, wire: &wire, time: UNIX_EPOCH, query_time: None };
        let mut out = Vec::new();
        encode(b"id", b"", &m, &mut out);
        let top = decode(&out).unwrap();
        let Some(Value::Bytes(inner)) = get(&top, 14) else { panic!() };
        let f = decode(inner).unwrap();
        assert_eq!(get(&f, 14), Some(&Value::Bytes(wire)));
        assert_eq!(get(&f, 2), None, "no address, no family");
    }

    #[test]
    fn the_decoder_refuses_truncated_input() {
        let m = Message { kind: Kind::AuthQuery, proto: Proto::Udp, query_addr: None, response_addr: None, wire: b"abc", time: UNIX_EPOCH, query_time: None };
        let mut out = Vec::new();
        encode(b"x", b"y", &m, &mut out);
        for cut in 1..out.len() {
            if let Some(f) = decode(&out[..cut]) {
                // a cut between fields decodes, to fewer fields
                assert!(f.len() < 4, "{cut}: {f:?}");
            }
        }
        assert_eq!(decode(&[0x0f]), None, "wire type 7");
    }
}
