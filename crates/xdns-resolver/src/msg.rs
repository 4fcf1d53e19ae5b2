//! Upstream messages: building queries (0x20 case, EDNS) and parsing replies into records with
//! decompressed names. Parsers never panic; every length is checked before use.

use rand::Rng;
use xdns_wire::name;

/// RR type numbers: the workspace's one table, from `domain` (re-exported here for the users
/// of `xdns_resolver::msg::rtype`).
pub use xdns_wire::rtype;

/// Class IN.
pub const CLASS_IN: u16 = 1;

/// One resource record, names uncompressed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rr {
    /// Owner, lowercased wire name.
    pub owner: Vec<u8>,
    /// Type.
    pub rtype: u16,
    /// TTL as received.
    pub ttl: u32,
    /// RDATA with embedded names of the well-known types decompressed (case kept).
    pub rdata: Vec<u8>,
}

impl Rr {
    /// The single name in NS/CNAME/PTR/DNAME RDATA, lowercased.
    pub fn target(&self) -> Option<Vec<u8>> {
        match self.rtype {
            rtype::NS | rtype::CNAME | rtype::PTR | rtype::DNAME if name::is_valid(&self.rdata) => {
                Some(self.rdata.to_ascii_lowercase())
            }
            _ => None,
        }
    }

    /// RFC 2308 §5: the negative TTL of an SOA record is min(TTL, MINIMUM).
    pub fn soa_negative_ttl(&self) -> Option<u32> {
        if self.rtype != rtype::SOA || self.rdata.len() < 20 {
            return None;
        }
        let m = &self.rdata[self.rdata.len() - 4..];
        Some(self.ttl.min(u32::from_be_bytes([m[0], m[1], m[2], m[3]])))
    }
}

/// A parsed reply.
#[derive(Clone, Debug, Default)]
pub struct Reply {
    /// Message ID.
    pub id: u16,
    /// Header flags (QR, AA, TC, ...; RCODE in the low 4 bits).
    pub flags: u16,
    /// The question name exactly as in the reply (case kept).
    pub qname: Vec<u8>,
    /// QTYPE.
    pub qtype: u16,
    /// QCLASS.
    pub qclass: u16,
    /// Answer section.
    pub answer: Vec<Rr>,
    /// Authority section.
    pub authority: Vec<Rr>,
    /// Additional section without OPT.
    pub additional: Vec<Rr>,
    /// Upper 8 bits of the extended RCODE, from OPT.
    pub ext_rcode: u8,
}

impl Reply {
    /// The 12-bit RCODE.
    pub fn rcode(&self) -> u16 {
        (self.flags & 0xF) | (u16::from(self.ext_rcode) << 4)
    }
    /// TC bit.
    pub fn truncated(&self) -> bool {
        self.flags & 0x0200 != 0
    }
    /// AA bit.
    pub fn authoritative(&self) -> bool {
        self.flags & 0x0400 != 0
    }
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

/// Reads RDATA at `start..end` of `msg`, decompressing the names of the types that may be
/// compressed (RFC 3597 §4). Other RDATA is copied.
///
/// The set is wider than the one `xdns_wire::BodyWriter` compresses when writing: DNAME too,
/// read liberally because some servers compress its target although RFC 6672 §2.5 says not to.
fn read_rdata(msg: &[u8], rtype: u16, start: usize, end: usize) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(end - start);
    match rtype {
        rtype::NS | rtype::CNAME | rtype::PTR | rtype::DNAME => {
            let p = name::read_name(&msg[..end], start, &mut out).ok()?;
            (p == end).then_some(out)
        }
        rtype::MX => {
            out.extend_from_slice(msg.get(start..start + 2)?);
            let p = name::read_name(&msg[..end], start + 2, &mut out).ok()?;
            (p == end).then_some(out)
        }
        rtype::SOA => {
            let p = name::read_name(&msg[..end], start, &mut out).ok()?;
            let p = name::read_name(&msg[..end], p, &mut out).ok()?;
            if end.checked_sub(p)? != 20 {
                return None;
            }
            out.extend_from_slice(&msg[p..end]);
            Some(out)
        }
        _ => Some(msg[start..end].to_vec()),
    }
}

/// Parses a reply. `None` if it is not a well-formed response with exactly one question.
pub fn parse_reply(msg: &[u8]) -> Option<Reply> {
    let id = be16(msg, 0)?;
    let flags = be16(msg, 2)?;
    if flags & 0x8000 == 0 || be16(msg, 4)? != 1 {
        return None;
    }
    let counts = [be16(msg, 6)?, be16(msg, 8)?, be16(msg, 10)?];
    let mut r = Reply {
        id,
        flags,
        ..Reply::default()
    };
    let mut pos = name::read_name(msg, 12, &mut r.qname).ok()?;
    r.qtype = be16(msg, pos)?;
    r.qclass = be16(msg, pos + 2)?;
    pos += 4;
    for (section, &count) in counts.iter().enumerate() {
        for _ in 0..count {
            let mut owner = Vec::new();
            let p = name::read_name(msg, pos, &mut owner).ok()?;
            let rt = be16(msg, p)?;
            let class = be16(msg, p + 2)?;
            let ttl = (u32::from(be16(msg, p + 4)?) << 16) | u32::from(be16(msg, p + 6)?);
            let len = usize::from(be16(msg, p + 8)?);
            let start = p + 10;
            let end = start + len;
            if end > msg.len() {
                return None;
            }
            pos = end;
            if rt == rtype::OPT {
                if section == 2 {
                    r.ext_rcode = (ttl >> 24) as u8;
                }
                continue;
            }
            if class != CLASS_IN {
                continue;
            }
            let rdata = read_rdata(msg, rt, start, end)?;
            // RFC 2181 §8: a TTL with the top bit set is treated as zero.
            let ttl = if ttl & 0x8000_0000 != 0 { 0 } else { ttl };
            owner.make_ascii_lowercase();
            let rr = Rr {
                owner,
                rtype: rt,
                ttl,
                rdata,
            };
            match section {
                0 => r.answer.push(rr),
                1 => r.authority.push(rr),
                _ => r.additional.push(rr),
            }
        }
    }
    Some(r)
}

/// Randomises the letter case of `key` (RFC draft "0x20"): each ASCII letter gets a random case.
pub fn randomize_case(key: &[u8], rng: &mut impl Rng) -> Vec<u8> {
    let mut out = key.to_vec();
    let mut pos = 0usize;
    while let Some(&len) = out.get(pos) {
        if len == 0 {
            break;
        }
        let end = (pos + 1 + len as usize).min(out.len());
        for b in &mut out[pos + 1..end] {
            if b.is_ascii_alphabetic() && rng.random::<bool>() {
                *b ^= 0x20;
            }
        }
        pos = end;
    }
    out
}

/// A query: RD=0 (iterative) or RD=1 (to a forwarder), one question, an OPT record advertising
/// `payload` (no DO, no options); `payload` 0 = no OPT record.
pub fn build_query(id: u16, qname: &[u8], qtype: u16, rd: bool, payload: u16) -> Vec<u8> {
    let mut m = Vec::with_capacity(12 + qname.len() + 4 + 11);
    m.extend_from_slice(&id.to_be_bytes());
    m.extend_from_slice(&(if rd { 0x0100u16 } else { 0 }).to_be_bytes());
    m.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, u8::from(payload > 0)]);
    m.extend_from_slice(qname);
    m.extend_from_slice(&qtype.to_be_bytes());
    m.extend_from_slice(&CLASS_IN.to_be_bytes());
    if payload == 0 {
        return m;
    }
    m.extend_from_slice(&[0, 0, 41]);
    m.extend_from_slice(&payload.to_be_bytes());
    m.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
    m
}

/// What a reply must match to be accepted: the server asked, the ID, and the question exactly
/// as sent (name with its 0x20 letter case, type, class).
#[derive(Debug)]
pub struct Expect {
    /// The server the query went to.
    pub server: std::net::SocketAddr,
    /// The query ID.
    pub id: u16,
    /// The question name as sent (case randomised).
    pub qname: Vec<u8>,
    /// QTYPE.
    pub qtype: u16,
    /// Replies that did not match (spoofing attempts or stray datagrams), for statistics.
    pub rejected: std::sync::atomic::AtomicU32,
}

impl Expect {
    /// True if the datagram `msg` from `from` answers our query; counts rejections.
    pub fn matches(&self, from: std::net::SocketAddr, msg: &[u8]) -> bool {
        let ok = from == self.server && self.matches_message(msg);
        if !ok {
            self.rejected
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        ok
    }

    /// The message check alone (TCP: the peer is the connection's).
    pub fn matches_message(&self, msg: &[u8]) -> bool {
        if be16(msg, 0) != Some(self.id) || be16(msg, 2).is_none_or(|f| f & 0x8000 == 0) {
            return false;
        }
        if be16(msg, 4) != Some(1) {
            return false;
        }
        let end = 12 + self.qname.len();
        // Byte-exact: a reply that changed the letter case fails the 0x20 check.
        msg.get(12..end) == Some(&self.qname[..])
            && be16(msg, end) == Some(self.qtype)
            && be16(msg, end + 2) == Some(CLASS_IN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn case_randomisation_keeps_letters_and_lengths() {
        let key = b"\x03www\x07example\x03com\x00";
        let mut rng = rand::rng();
        let mut changed = false;
        for _ in 0..20 {
            let r = randomize_case(key, &mut rng);
            assert_eq!(r.to_ascii_lowercase(), key.to_vec());
            changed |= r != key.to_vec();
        }
        assert!(changed);
        // Digits, hyphens and length bytes are never touched.
        let k2 = b"\x051-2-3\x00";
        assert_eq!(randomize_case(k2, &mut rng), k2.to_vec());
    }

    #[test]
    fn query_round_trip_and_expect() {
        let q = build_query(0xBEEF, b"\x03WwW\x02eX\x00", rtype::A, false, 1232);
        let mut reply = q.clone();
        reply[2] |= 0x80;
        let e = Expect {
            server: "127.0.0.1:53".parse().unwrap(),
            id: 0xBEEF,
            qname: b"\x03WwW\x02eX\x00".to_vec(),
            qtype: rtype::A,
            rejected: Default::default(),
        };
        let table: &[(&str, &str, Vec<u8>, bool)] = &[
            ("good", "127.0.0.1:53", reply.clone(), true),
            ("wrong source", "127.0.0.2:53", reply.clone(), false),
            ("wrong port", "127.0.0.1:54", reply.clone(), false),
            ("query not reply", "127.0.0.1:53", q.clone(), false),
            (
                "wrong id",
                "127.0.0.1:53",
                {
                    let mut r = reply.clone();
                    r[1] ^= 1;
                    r
                },
                false,
            ),
            (
                "case changed",
                "127.0.0.1:53",
                {
                    let mut r = reply.clone();
                    r[13] = b'w';
                    r
                },
                false,
            ),
            (
                "type changed",
                "127.0.0.1:53",
                {
                    let mut r = reply.clone();
                    r[21] = 28;
                    r
                },
                false,
            ),
            ("short", "127.0.0.1:53", reply[..10].to_vec(), false),
        ];
        for (what, from, msg, want) in table {
            assert_eq!(e.matches(from.parse().unwrap(), msg), *want, "{what}");
        }
        let p = parse_reply(&reply).unwrap();
        assert_eq!(p.qname, b"\x03WwW\x02eX\x00".to_vec());
        assert_eq!(p.qtype, 1);
        assert!(p.additional.is_empty());
    }
}
