//! An in-memory DNS tree for tests: servers by address, each authoritative for some zones, with
//! behaviours (silent, spoofing, truncating). A tiny RFC 1034 §4.3.2 authority answers.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Duration;

use xdns_wire::name::{from_presentation, is_subdomain};

use crate::msg::{rtype, Expect};
use crate::net::{BoxFut, Network};

/// One record: owner (lowercased wire), type, TTL, RDATA.
pub type Rec = (Vec<u8>, u16, u32, Vec<u8>);

/// How a server behaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Behaviour {
    /// Answers.
    Normal,
    /// Never answers.
    Silent,
    /// First sends forged replies (wrong ID, case, question, source), then the real one.
    SpoofThenAnswer,
    /// Sends only forged replies (a poisoning attempt without the real server).
    SpoofOnly,
    /// UDP replies have TC=1 and no records; TCP answers.
    Truncate,
    /// FORMERR to queries with an OPT record (a server from before EDNS).
    NoEdns,
}

/// A zone: apex and records.
#[derive(Clone, Debug)]
pub struct Zone {
    pub apex: Vec<u8>,
    pub records: Vec<Rec>,
}

/// A server.
#[derive(Clone, Debug)]
pub struct Server {
    pub zones: Vec<Zone>,
    pub behaviour: Behaviour,
}

/// The fake network.
#[derive(Default)]
pub struct FakeNet {
    pub servers: Mutex<HashMap<IpAddr, Server>>,
    /// Queries received per server address.
    pub queries: Mutex<HashMap<IpAddr, u64>>,
    pub total: AtomicU64,
    /// Every question asked: (server, lowercased name, type).
    pub seen: Mutex<Vec<(IpAddr, Vec<u8>, u16)>>,
    /// The tokio task each question was sent from (`None`: outside a task).
    pub tasks: Mutex<Vec<Option<tokio::task::Id>>>,
    /// Extra forged datagram to deliver: the poisoned A record data.
    pub poison: Vec<u8>,
}

pub fn n(s: &str) -> Vec<u8> {
    from_presentation(s).unwrap().to_ascii_lowercase()
}

/// Parses `owner ttl TYPE data...` lines.
pub fn records(text: &str) -> Vec<Rec> {
    let mut out = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let f: Vec<&str> = line.split_whitespace().collect();
        let owner = n(f[0]);
        let ttl: u32 = f[1].parse().unwrap();
        let (t, data) = match f[2] {
            "A" => (
                rtype::A,
                f[3].parse::<std::net::Ipv4Addr>()
                    .unwrap()
                    .octets()
                    .to_vec(),
            ),
            "AAAA" => (
                rtype::AAAA,
                f[3].parse::<std::net::Ipv6Addr>()
                    .unwrap()
                    .octets()
                    .to_vec(),
            ),
            "NS" => (rtype::NS, from_presentation(f[3]).unwrap()),
            "CNAME" => (rtype::CNAME, from_presentation(f[3]).unwrap()),
            "DNAME" => (rtype::DNAME, from_presentation(f[3]).unwrap()),
            "TXT" => {
                let mut d = vec![f[3].len() as u8];
                d.extend_from_slice(f[3].as_bytes());
                (16, d)
            }
            "SOA" => {
                let mut d = from_presentation(f[3]).unwrap();
                d.extend(from_presentation(f[4]).unwrap());
                for v in &f[5..10] {
                    d.extend(v.parse::<u32>().unwrap().to_be_bytes());
                }
                (rtype::SOA, d)
            }
            other => panic!("type {other}"),
        };
        out.push((owner, t, ttl, data));
    }
    out
}

fn put_rr(m: &mut Vec<u8>, r: &Rec) {
    m.extend_from_slice(&r.0);
    m.extend_from_slice(&r.1.to_be_bytes());
    m.extend_from_slice(&1u16.to_be_bytes());
    m.extend_from_slice(&r.2.to_be_bytes());
    m.extend_from_slice(&(r.3.len() as u16).to_be_bytes());
    m.extend_from_slice(&r.3);
}

/// Builds a reply message (names uncompressed).
pub fn message(id: u16, flags: u16, qname: &[u8], qtype: u16, sections: [&[Rec]; 3]) -> Vec<u8> {
    let mut m = Vec::new();
    m.extend_from_slice(&id.to_be_bytes());
    m.extend_from_slice(&(0x8000 | flags).to_be_bytes());
    m.extend_from_slice(&1u16.to_be_bytes());
    for s in sections {
        m.extend_from_slice(&(s.len() as u16).to_be_bytes());
    }
    m.extend_from_slice(qname);
    m.extend_from_slice(&qtype.to_be_bytes());
    m.extend_from_slice(&1u16.to_be_bytes());
    for s in sections {
        for r in s {
            put_rr(&mut m, r);
        }
    }
    m
}

/// The authoritative answer of `server` for `qname` (lowercased) / `qtype`: (flags, sections).
pub fn authority(server: &Server, qname: &[u8], qtype: u16) -> Option<(u16, [Vec<Rec>; 3])> {
    let zone = server
        .zones
        .iter()
        .filter(|z| is_subdomain(qname, &z.apex))
        .max_by_key(|z| z.apex.len())?;
    let recs = &zone.records;
    let soa: Vec<Rec> = recs
        .iter()
        .filter(|r| r.0 == zone.apex && r.1 == rtype::SOA)
        .cloned()
        .collect();
    // Delegation at or above qname (below the apex).
    let cut = recs
        .iter()
        .filter(|r| r.1 == rtype::NS && r.0 != zone.apex && is_subdomain(qname, &r.0))
        .map(|r| r.0.clone())
        .max_by_key(|o| o.len());
    if let Some(cut) = cut {
        let ns: Vec<Rec> = recs
            .iter()
            .filter(|r| r.0 == cut && r.1 == rtype::NS)
            .cloned()
            .collect();
        let glue: Vec<Rec> = recs
            .iter()
            .filter(|r| {
                (r.1 == rtype::A || r.1 == rtype::AAAA)
                    && ns.iter().any(|n| n.3.to_ascii_lowercase() == r.0)
            })
            .cloned()
            .collect();
        return Some((0, [vec![], ns, glue]));
    }
    let mut answer = Vec::new();
    let mut cur = qname.to_vec();
    for _ in 0..8 {
        let at: Vec<&Rec> = recs.iter().filter(|r| r.0 == cur).collect();
        let data: Vec<Rec> = at
            .iter()
            .filter(|r| r.1 == qtype)
            .map(|r| (*r).clone())
            .collect();
        if !data.is_empty() {
            // Addresses of NS names in the zone go in the additional section (priming).
            let extra: Vec<Rec> = if qtype == rtype::NS {
                recs.iter()
                    .filter(|r| {
                        (r.1 == rtype::A || r.1 == rtype::AAAA)
                            && data.iter().any(|d| d.3.to_ascii_lowercase() == r.0)
                    })
                    .cloned()
                    .collect()
            } else {
                vec![]
            };
            answer.extend(data);
            return Some((0x0400, [answer, vec![], extra]));
        }
        if let Some(c) = at.iter().find(|r| r.1 == rtype::CNAME) {
            answer.push((*c).clone());
            cur = c.3.to_ascii_lowercase();
            if !is_subdomain(&cur, &zone.apex) {
                return Some((0x0400, [answer, vec![], vec![]]));
            }
            continue;
        }
        let exists = recs.iter().any(|r| is_subdomain(&r.0, &cur));
        let rcode = if exists { 0 } else { 3 };
        return Some((0x0400 | rcode, [answer, soa, vec![]]));
    }
    Some((0x0402, [vec![], vec![], vec![]]))
}

impl FakeNet {
    pub fn add(&self, ip: &str, behaviour: Behaviour, zones: Vec<Zone>) {
        lock(&self.servers).insert(ip.parse().unwrap(), Server { zones, behaviour });
    }

    /// Changes how the server at `ip` behaves from now on (e.g. falls silent).
    pub fn set_behaviour(&self, ip: &str, behaviour: Behaviour) {
        lock(&self.servers).get_mut(&ip.parse().unwrap()).unwrap().behaviour = behaviour;
    }

    pub fn count(&self, ip: &str) -> u64 {
        lock(&self.queries)
            .get(&ip.parse::<IpAddr>().unwrap())
            .copied()
            .unwrap_or(0)
    }

    fn note(&self, ip: IpAddr, expect: &Expect) {
        lock(&self.seen).push((ip, expect.qname.to_ascii_lowercase(), expect.qtype));
        lock(&self.tasks).push(tokio::task::try_id());
        self.total.fetch_add(1, Relaxed);
        *lock(&self.queries).entry(ip).or_insert(0) += 1;
    }

    fn answer(
        &self,
        query: &[u8],
        expect: &Expect,
        tcp: bool,
    ) -> Option<(Behaviour, Vec<Vec<u8>>, Vec<u8>)> {
        let server = lock(&self.servers).get(&expect.server.ip()).cloned()?;
        let qname_sent = expect.qname.clone();
        let key = qname_sent.to_ascii_lowercase();
        let id = u16::from_be_bytes([query[0], query[1]]);
        let (flags, s) =
            authority(&server, &key, expect.qtype).unwrap_or((5, [vec![], vec![], vec![]]));
        let has_opt = query.get(11).is_some_and(|&c| c > 0);
        let real = if server.behaviour == Behaviour::NoEdns && has_opt {
            message(id, 1, &qname_sent, expect.qtype, [&[], &[], &[]])
        } else if server.behaviour == Behaviour::Truncate && !tcp {
            message(
                id,
                0x0200 | (flags & 0x0400),
                &qname_sent,
                expect.qtype,
                [&[], &[], &[]],
            )
        } else {
            message(id, flags, &qname_sent, expect.qtype, [&s[0], &s[1], &s[2]])
        };
        // Forged: a poisoned A record for the question.
        let poison: Vec<Rec> = vec![(key.clone(), expect.qtype, 86400, self.poison.clone())];
        let lower = message(id, 0x0400, &key, expect.qtype, [&poison, &[], &[]]);
        let forged = vec![
            message(
                id.wrapping_add(1),
                0x0400,
                &qname_sent,
                expect.qtype,
                [&poison, &[], &[]],
            ),
            // A lowercased question fails the 0x20 check (unless the name has no letters).
            if lower[12..12 + key.len()] != qname_sent[..] {
                lower
            } else {
                vec![0; 3]
            },
            message(
                id,
                0x0400,
                &n("other.example."),
                expect.qtype,
                [&poison, &[], &[]],
            ),
            message(id, 0x0400, &qname_sent, 16, [&poison, &[], &[]]),
        ];
        Some((server.behaviour, forged, real))
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap()
}

impl Network for FakeNet {
    fn udp<'a>(
        &'a self,
        query: &'a [u8],
        expect: &'a Expect,
        timeout: Duration,
    ) -> BoxFut<'a, io::Result<Vec<u8>>> {
        Box::pin(async move {
            self.note(expect.server.ip(), expect);
            let Some((b, forged, real)) = self.answer(query, expect, false) else {
                tokio::time::sleep(timeout).await;
                return Err(io::ErrorKind::TimedOut.into());
            };
            match b {
                Behaviour::Silent => {}
                Behaviour::SpoofThenAnswer | Behaviour::SpoofOnly => {
                    for f in &forged {
                        if expect.matches(expect.server, f) {
                            return Ok(f.clone());
                        }
                    }
                    // The right message from the wrong source address and port.
                    let wrong =
                        SocketAddr::new(expect.server.ip(), expect.server.port().wrapping_add(1));
                    if expect.matches(wrong, &real) {
                        return Ok(real);
                    }
                    if b == Behaviour::SpoofThenAnswer && expect.matches(expect.server, &real) {
                        return Ok(real);
                    }
                }
                Behaviour::Normal | Behaviour::Truncate | Behaviour::NoEdns => {
                    if expect.matches(expect.server, &real) {
                        return Ok(real);
                    }
                }
            }
            tokio::time::sleep(timeout).await;
            Err(io::ErrorKind::TimedOut.into())
        })
    }

    fn tcp<'a>(
        &'a self,
        query: &'a [u8],
        expect: &'a Expect,
        timeout: Duration,
    ) -> BoxFut<'a, io::Result<Vec<u8>>> {
        Box::pin(async move {
            self.note(expect.server.ip(), expect);
            match self.answer(query, expect, true) {
                Some((Behaviour::Normal | Behaviour::Truncate, _, real))
                    if expect.matches_message(&real) =>
                {
                    Ok(real)
                }
                _ => {
                    tokio::time::sleep(timeout).await;
                    Err(io::ErrorKind::TimedOut.into())
                }
            }
        })
    }
}
