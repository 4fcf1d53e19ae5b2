//! Shared helpers of the engine tests: the test zone set, query construction with `domain`,
//! and response checks/summaries parsed with `domain`.
#![allow(dead_code)]

use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;

use domain::base::iana::{Class, Rcode};
use domain::base::{Message, MessageBuilder, Name, ParsedName, Rtype};
use domain::rdata::AllRecordData;
use xdns_zone::{load_zone, respond, Outcome, RespondConfig, Transport, ZoneSet, ZoneSource};

/// Directory of the shared test zones.
pub fn zones_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/zones")
}

/// example.com and example.net, loaded with the real loader.
pub fn zone_set() -> ZoneSet {
    let mut set = ZoneSet::default();
    for apex in ["example.com.", "example.net."] {
        let src = ZoneSource { name: apex.into(), file: zones_dir().join(format!("{}zone", apex)) };
        let z = load_zone(&src, None).unwrap_or_else(|e| panic!("{apex}: {e:?}"));
        set.zones.insert(z.apex.clone(), Arc::new(z));
    }
    set
}

/// EDNS settings of a test query.
#[derive(Clone, Copy, Debug)]
pub struct Edns {
    pub payload: u16,
    pub dnssec_ok: bool,
    pub version: u8,
}

/// Builds a query with `domain`.
pub fn query(id: u16, qname: &str, qtype: u16, edns: Option<Edns>) -> Vec<u8> {
    let mut b = MessageBuilder::new_vec().question();
    b.header_mut().set_id(id);
    b.header_mut().set_rd(true);
    b.push((Name::<Vec<u8>>::from_str(qname).unwrap(), Rtype::from_int(qtype), Class::IN)).unwrap();
    let mut ar = b.additional();
    if let Some(e) = edns {
        ar.opt(|o| {
            o.set_udp_payload_size(e.payload);
            o.set_dnssec_ok(e.dnssec_ok);
            o.set_version(e.version);
            Ok(())
        })
        .unwrap();
    }
    ar.finish()
}

/// A parsed response, records in presentation form (`owner TTL TYPE RDATA`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    pub rcode: Rcode,
    pub aa: bool,
    pub tc: bool,
    pub answer: Vec<String>,
    pub authority: Vec<String>,
    pub additional: Vec<String>,
    /// (payload, DO, extended rcode) of the OPT, if any.
    pub opt: Option<(u16, bool, u16)>,
    pub len: usize,
}

fn section(sec: domain::base::message::RecordSection<'_, Vec<u8>>) -> Vec<String> {
    let mut v = Vec::new();
    for rr in sec {
        let rr = rr.expect("record parses");
        if rr.rtype() == Rtype::OPT {
            continue;
        }
        let rec = rr
            .into_record::<AllRecordData<_, ParsedName<_>>>()
            .expect("record data parses")
            .expect("record present");
        v.push(format!("{} {} {} {}", rec.owner(), rec.ttl().as_secs(), rec.rtype(), rec.data()));
    }
    v
}

/// Parses `resp` with `domain`, checks it answers `q` (ID, QR, opcode, question echoed byte for
/// byte as the client's decompressed name), and summarises it.
pub fn check(q: &[u8], resp: &[u8]) -> Summary {
    let msg = Message::from_octets(resp.to_vec()).expect("response parses");
    assert_eq!(resp[0..2], q[0..2], "ID echoed");
    assert!(msg.header().qr(), "QR set");
    assert_eq!(msg.header().rd(), q[2] & 1 == 1, "RD copied");
    let qmsg = Message::from_octets(q.to_vec()).unwrap();
    if msg.header_counts().qdcount() == 1 {
        let qq = qmsg.first_question().unwrap();
        let rq = msg.first_question().expect("question parses");
        assert_eq!(rq.qtype(), qq.qtype());
        // Letter case must be echoed exactly.
        assert_eq!(rq.qname().to_string(), qq.qname().to_string(), "question echoed");
    }
    let opt = msg.opt().map(|o| (o.udp_payload_size(), o.dnssec_ok(), msg.opt_rcode().to_int()));
    Summary {
        rcode: msg.header().rcode(),
        aa: msg.header().aa(),
        tc: msg.header().tc(),
        answer: section(msg.answer().expect("answer")),
        authority: section(msg.authority().expect("authority")),
        additional: section(msg.additional().expect("additional")),
        opt,
        len: resp.len(),
    }
}

/// Runs `respond` with the default config.
pub fn ask(zones: &ZoneSet, q: &[u8], transport: Transport) -> (Outcome, Vec<u8>) {
    let mut out = Vec::new();
    let o = respond(zones, q, transport, &RespondConfig::default(), &mut out);
    (o, out)
}

/// Builds, answers over UDP without EDNS, checks and summarises.
pub fn udp(zones: &ZoneSet, qname: &str, qtype: u16) -> Summary {
    let q = query(0x4242, qname, qtype, None);
    let (o, r) = ask(zones, &q, Transport::Udp);
    assert!(matches!(o, Outcome::Answered { .. }), "{qname} {qtype}: {o:?}");
    check(&q, &r)
}
