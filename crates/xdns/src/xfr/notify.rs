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
    let tsig = Tsig::new(*data.algorithm(), data.time_signed(), data.fudge(), &b""[..], msg.header().id(), error, &b""[..]).ok()?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{parse, Overrides};
    use crate::xfr::primary::{outgoing, Decision};
    use domain::base::{Name, Rtype};
    use domain::tsig::ClientTransaction;
    use std::str::FromStr;
    use xdns_zone::Transport;

    const SECRET: &str = "Wm9uZSB0cmFuc2ZlcnMgZm9yIHhkbnMgdGVzdHMgb25seSE=";

    /// A primary zone `p.` (transfers to 127.0.0.0/8, keyed) and a secondary `s.` (primary
    /// 127.0.0.2, keyed), as served.
    fn served() -> (Served, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!("xdns-notify-{}-{:?}", std::process::id(), std::thread::current().id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("p.zone"), "$TTL 60\n@ SOA ns.p. h.p. 1 60 60 600 60\n@ NS ns\nns A 198.18.0.1\n").unwrap();
        let text = format!(
            "[[key]]\nname = \"k\"\nalgorithm = \"hmac-sha256\"\nsecret = \"{SECRET}\"\n\
             [[zone]]\nname = \"p.\"\nfile = \"p.zone\"\nallow_transfer = [\"127.0.0.0/8\"]\nkey = \"k\"\n\
             [[zone]]\nname = \"s.\"\nprimaries = [\"127.0.0.2\"]\nkey = \"k\"\n"
        );
        let cfg = parse(&text, &dir.join("x.toml"), &Overrides::default()).unwrap();
        (crate::reload::build(&cfg, None).0, dir)
    }

    fn signed(zone: &str, rtype: Rtype, notify: bool) -> Vec<u8> {
        let key = crate::xfr::keys::KeyConfig::parse("k", "hmac-sha256", SECRET).unwrap().key().unwrap();
        let mut b = MessageBuilder::new_vec();
        b.header_mut().set_id(7);
        if notify {
            b.header_mut().set_opcode(Opcode::NOTIFY);
        }
        let mut q = b.question();
        q.push((Name::<Vec<u8>>::from_str(zone).unwrap(), rtype)).unwrap();
        let mut a = q.additional();
        ClientTransaction::request(key, &mut a, Time48::now()).unwrap();
        a.finish()
    }

    fn rcode(out: &[u8]) -> u8 {
        out[3] & 0x0f
    }

    /// The decisions, then every truncation and every single-byte change of a signed NOTIFY
    /// and a signed AXFR: an answer or nothing, never a panic.
    #[test]
    fn notify_and_transfer_requests_decide_and_never_panic() {
        let (served, dir) = served();
        let from_primary = Some(IpAddr::from([127, 0, 0, 2]));
        let mut out = Vec::new();
        let n = signed("s.", Rtype::SOA, true);
        assert!(matches!(notify(&served, &n, from_primary, &mut out), Some(Outcome::Answered { rcode: 0, .. })));
        assert_eq!(rcode(&out), 0);
        let elsewhere = Some(IpAddr::from([127, 0, 0, 3]));
        notify(&served, &n, elsewhere, &mut out).unwrap();
        assert_eq!(rcode(&out), 9, "NOTAUTH from another address");
        notify(&served, &signed("p.", Rtype::SOA, true), from_primary, &mut out).unwrap();
        assert_eq!(rcode(&out), 9, "NOTAUTH for a zone we are not a secondary of");
        let a = signed("p.", Rtype::AXFR, false);
        assert!(matches!(outgoing(&served, &a, from_primary, Transport::Tcp, &mut out), Some(Decision::Stream(_))));
        let Some(Decision::Reply(_)) = outgoing(&served, &a, Some(IpAddr::from([10, 0, 0, 1])), Transport::Tcp, &mut out) else {
            panic!("not refused")
        };
        assert_eq!(rcode(&out), 5, "REFUSED outside allow_transfer");
        for msg in [n, a] {
            for cut in 0..msg.len() {
                let _ = notify(&served, &msg[..cut], from_primary, &mut out);
                let _ = outgoing(&served, &msg[..cut], from_primary, Transport::Tcp, &mut out);
            }
            for i in 0..msg.len() {
                for v in [0u8, 1, 0x3f, 0xc0, 0xff] {
                    let mut m = msg.clone();
                    m[i] = v;
                    let _ = notify(&served, &m, from_primary, &mut out);
                    if let Some(Decision::Stream(mut t)) = outgoing(&served, &m, from_primary, Transport::Tcp, &mut out) {
                        while t.next().is_some() {}
                    }
                }
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
