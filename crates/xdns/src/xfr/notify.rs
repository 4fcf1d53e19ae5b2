//! The query-plan step of transfers: NOTIFY (RFC 1996) from a zone's primaries, and SERVFAIL
//! for a zone past its expire time (RFC 1035 §3.3.13: no longer authoritative).
//!
//! A NOTIFY is accepted only for a configured secondary zone, only from one of its primaries'
//! addresses, and only with a good TSIG signature when the zone has a key; it then wakes the
//! zone's task, which checks the primary at once. Knot DNS answers a NOTIFY it does not
//! accept with NOTAUTH (its ACL), with a TSIG error when a signature is bad; so does xdns.

use std::net::IpAddr;

use domain::base::iana::{Opcode, Rcode, TsigRcode};
use domain::base::name::ParsedName;
use domain::base::{Message, MessageBuilder};
use domain::rdata::tsig::{Time48, Tsig};
use domain::tsig::ServerTransaction;
use xdns_wire::response::error_response;
use xdns_wire::Query;
use xdns_zone::load::name_key;
use xdns_zone::validate::in_zone;
use xdns_zone::{DropReason, Outcome};

use crate::reload::Served;

/// SERVFAIL (RCODE 2).
const SERVFAIL: u16 = 2;

/// A NOTIFY (opcode 4): the answer; `None` for any other message.
pub fn notify(served: &Served, wire: &[u8], peer: Option<IpAddr>, out: &mut Vec<u8>) -> Option<Outcome> {
    if wire.len() < 12 || wire[2] & 0x80 != 0 || (wire[2] >> 3) & 0x0f != 4 {
        return None;
    }
    out.clear();
    let Ok(mut msg) = Message::from_octets(wire.to_vec()) else {
        return Some(Outcome::Dropped(DropReason::Malformed));
    };
    let reply = |out: &mut Vec<u8>, msg: &Message<Vec<u8>>, rcode: Rcode| -> Outcome {
        match MessageBuilder::new_vec().start_answer(msg, rcode) {
            Ok(mut b) => {
                b.header_mut().set_aa(rcode == Rcode::NOERROR);
                out.extend_from_slice(&b.finish());
                Outcome::Answered { rcode: rcode.to_int().into(), qtype: 6, truncated: false }
            }
            Err(_) => Outcome::Dropped(DropReason::Malformed),
        }
    };
    let Some(q) = msg.first_question() else {
        return Some(reply(out, &msg, Rcode::FORMERR));
    };
    let apex = name_key(&q.qname());
    let sec = served.xfr.as_ref().and_then(|r| r.find(&apex));
    let sec = sec.as_ref();
    let Some(sec) = sec else {
        tracing::info!(zone = %xdns_zone::load::key_to_text(&apex), peer = ?peer, "NOTIFY for a zone we are not a secondary of: NOTAUTH");
        return Some(reply(out, &msg, Rcode::NOTAUTH));
    };
    if !peer.is_some_and(|p| sec.cfg.primaries.iter().any(|a| a.ip() == p)) {
        sec.count_refused_notify();
        tracing::warn!(zone = %sec.cfg.name, peer = ?peer, "NOTIFY from an address that is not a primary: NOTAUTH");
        return Some(reply(out, &msg, Rcode::NOTAUTH));
    }
    let signer = match &sec.key {
        None => None,
        Some(key) => match ServerTransaction::request(key, &mut msg, Time48::now()) {
            Ok(Some(tx)) => Some(tx),
            Ok(None) => {
                sec.count_refused_notify();
                tracing::warn!(zone = %sec.cfg.name, peer = ?peer, "unsigned NOTIFY for a zone with a key: NOTAUTH");
                return Some(reply(out, &msg, Rcode::NOTAUTH));
            }
            Err(e) => {
                sec.count_refused_notify();
                // domain 0.12 reports a wrong MAC as FORMERR; RFC 8945 §5.2.2 (and Knot) say BADSIG
                let error = match e.error() {
                    TsigRcode::FORMERR => TsigRcode::BADSIG,
                    other => other,
                };
                tracing::warn!(zone = %sec.cfg.name, peer = ?peer, error = %error, "NOTIFY with a bad TSIG signature: NOTAUTH");
                return Some(tsig_error(out, &msg, error).unwrap_or_else(|| reply(out, &msg, Rcode::NOTAUTH)));
            }
        },
    };
    tracing::info!(zone = %sec.cfg.name, peer = ?peer, "NOTIFY accepted: checking the primary");
    sec.wake();
    let Ok(mut b) = MessageBuilder::new_vec().start_answer(&msg, Rcode::NOERROR) else {
        return Some(Outcome::Dropped(DropReason::Malformed));
    };
    b.header_mut().set_aa(true);
    b.header_mut().set_opcode(Opcode::NOTIFY);
    let mut b = b.additional();
    if let Some(tx) = signer {
        if tx.answer(&mut b, Time48::now()).is_err() {
            return Some(Outcome::Dropped(DropReason::Malformed));
        }
    }
    out.extend_from_slice(&b.finish());
    Some(Outcome::Answered { rcode: 0, qtype: 6, truncated: false })
}

/// NOTAUTH with the request's TSIG record carrying `error` and no MAC (RFC 8945 §5.3.2).
fn tsig_error(out: &mut Vec<u8>, msg: &Message<Vec<u8>>, error: TsigRcode) -> Option<Outcome> {
    let rec = msg
        .additional()
        .ok()?
        .limit_to::<Tsig<&[u8], ParsedName<&[u8]>>>()
        .filter_map(Result::ok)
        .last()?;
    let data = rec.data();
    let tsig = Tsig::new(data.algorithm().clone(), data.time_signed(), data.fudge(), &b""[..], msg.header().id(), error, &b""[..]).ok()?;
    let mut b = MessageBuilder::new_vec().start_answer(msg, Rcode::NOTAUTH).ok()?.additional();
    b.push((rec.owner(), rec.class(), rec.ttl(), tsig)).ok()?;
    out.clear();
    out.extend_from_slice(&b.finish());
    Some(Outcome::Answered { rcode: Rcode::NOTAUTH.to_int().into(), qtype: 6, truncated: false })
}

/// A query for a name in an expired zone (and in no served zone closer to it): SERVFAIL.
pub fn expired(served: &Served, wire: &[u8], edns_payload: u16, out: &mut Vec<u8>) -> Option<Outcome> {
    if served.expired.is_empty() {
        return None;
    }
    let q = Query::parse(wire).ok()?;
    let qq = q.question.as_ref()?;
    let name = qq.key();
    let apex = served.expired.iter().filter(|e| in_zone(e, name)).max_by_key(|e| e.len())?;
    if served.zones.find(name).is_some_and(|z| z.apex.len() > apex.len()) {
        return None; // a zone below the expired one is served
    }
    let rcode = error_response(&q, SERVFAIL, edns_payload, out);
    Some(Outcome::Answered { rcode, qtype: qq.qtype, truncated: false })
}
