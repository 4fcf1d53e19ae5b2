//! The whole authoritative answer path for one message (owner: engine).
//!
//! CONTRACT (used by the daemon, the fuzz target and the XDP differential tests):
//! `respond(zones, query, transport, cfg, out) -> Outcome` writes the complete response into
//! `out` (cleared first) when the outcome is `Answered`; for `Dropped`, `out` is empty.
//!
//! The path: parse ([`xdns_wire::Query::parse`]) → drop (short, QR=1, unreadable question) /
//! FORMERR (QDCOUNT ≠ 1, more than one OPT, malformed records) / NOTIMP (opcode ≠ QUERY) /
//! BADVERS (EDNS version > 0, RFC 6891 §6.1.3) / REFUSED (class other than IN or ANY, no zone,
//! zone transfer requests) → [`ZoneSet::find`] → [`select`] → [`compile`] (with the DO bit:
//! [`compile_dnssec`], RRSIGs and denial proofs of signed zones) → [`assemble`].
//!
//! Zone transfers are not served: AXFR over UDP gets NOTIMP (Knot and NSD do the same),
//! AXFR over TCP and IXFR get REFUSED (Knot and NSD answer NOTAUTH when transfers are not
//! allowed; REFUSED is what RFC 5936 §4.2 suggests). TSIG records are ignored (no keys).

use crate::compile::{compile, compile_dnssec, compile_for};
use crate::lookup::{rtype, select, BodyKind};
use crate::tree::ZoneSet;
use xdns_wire::response::{assemble, error_response, rcode, Limits};
use xdns_wire::{ParseError, Query, Status};

/// The class IN.
const CLASS_IN: u16 = 1;
/// QCLASS ANY (RFC 1035 §3.2.5): every zone here is IN, so it is answered as IN (the question
/// echoed with ANY, AA set), as Knot DNS does; NSD answers the same data without AA.
const CLASS_ANY: u16 = 255;

/// Transport the message came over.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Transport {
    /// UDP: responses are limited by EDNS (or 512 bytes) and truncated.
    Udp,
    /// TCP: responses up to 65535 bytes, never truncated.
    Tcp,
}

/// Server-wide answer settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RespondConfig {
    /// EDNS UDP payload size we advertise and cap UDP responses at (default 1232).
    pub edns_payload: u16,
}

impl Default for RespondConfig {
    fn default() -> Self {
        Self { edns_payload: 1232 }
    }
}

/// What happened to one message, for statistics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A response was written. `rcode` is the full 12-bit RCODE (16 = BADVERS);
    /// `qtype` is 0 when there was no question.
    Answered { rcode: u16, qtype: u16, truncated: bool },
    /// No response: the reason, for statistics.
    Dropped(DropReason),
}

/// Why a message got no response.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// Shorter than a header, or the header/question could not be parsed.
    Malformed,
    /// QR=1: responses are never answered.
    Response,
}

/// Answers one message: see the module documentation. Never panics on any input.
pub fn respond(
    zones: &ZoneSet,
    query: &[u8],
    transport: Transport,
    cfg: &RespondConfig,
    out: &mut Vec<u8>,
) -> Outcome {
    out.clear();
    let q = match Query::parse(query) {
        Ok(q) => q,
        Err(ParseError::Response) => return Outcome::Dropped(DropReason::Response),
        Err(_) => return Outcome::Dropped(DropReason::Malformed),
    };
    let qtype = q.question.as_ref().map_or(0, |qq| qq.qtype);
    let error = |rc: u16, out: &mut Vec<u8>| {
        let sent = error_response(&q, rc, cfg.edns_payload, out);
        Outcome::Answered { rcode: sent, qtype, truncated: false }
    };
    match q.status {
        Status::FormErr => return error(rcode::FORMERR, out),
        Status::NotImp => return error(rcode::NOTIMP, out),
        Status::Ok => {}
    }
    if q.edns.is_some_and(|e| e.version > 0) {
        return error(rcode::BADVERS, out);
    }
    let Some(qq) = q.question.as_ref() else {
        return error(rcode::FORMERR, out);
    };
    if qq.qclass != CLASS_IN && qq.qclass != CLASS_ANY {
        return error(rcode::REFUSED, out);
    }
    match (qtype, transport) {
        (rtype::AXFR, Transport::Udp) => return error(rcode::NOTIMP, out),
        (rtype::AXFR | rtype::IXFR, _) => return error(rcode::REFUSED, out),
        _ => {}
    }
    let Some(zone) = zones.find(qq.key()) else {
        return error(rcode::REFUSED, out);
    };
    let key = select(zone, qq.key(), qtype, transport);
    // DO=1 (RFC 3225): signatures and proofs, which may depend on the question name.
    let body = if q.edns.is_some_and(|e| e.dnssec_ok) {
        // Type and Other bodies depend on the base alone (the kernel compiles them so).
        let qname = match key.kind {
            BodyKind::Type(_) | BodyKind::Other => &key.base[..],
            _ => qq.key(),
        };
        compile_dnssec(zone, &key, qname)
    } else if matches!(key.kind, BodyKind::Dname(_)) {
        compile_for(zone, &key, qq.key())
    } else {
        compile(zone, &key)
    };
    let limits = match transport {
        Transport::Udp => Limits::udp(q.edns.as_ref(), cfg.edns_payload),
        Transport::Tcp => Limits::tcp(cfg.edns_payload),
    };
    match assemble(&q, &body, &limits, out) {
        Ok(a) => Outcome::Answered { rcode: a.rcode, qtype, truncated: a.truncated },
        // Cannot happen for keys from `select` (the base is a suffix of the question); answer
        // SERVFAIL rather than nothing.
        Err(_) => error(rcode::SERVFAIL, out),
    }
}
