//! Assembling responses: `header | question (as sent) | body (fixups applied) | OPT`.
//!
//! The size rule is the one of docs/DESIGN-NOTES.md, shared with the XDP program:
//! if the whole response fits the limit it is sent; else if header, question, answer and
//! authority (plus OPT) fit and the additional section is not required, it is sent without the
//! additional records and TC=0; else header, question and OPT are sent with TC=1 and no records.
//! The limit is 512 without EDNS, else `max(512, min(client payload, our payload))`; over TCP
//! it is 65535.

use crate::body::Body;
use crate::query::{Edns, Query, Question};
use crate::{HEADER_LEN, QNAME_OFFSET};

/// RCODE values used by the engine (RFC 1035, RFC 6891).
pub mod rcode {
    /// No error.
    pub const NOERROR: u16 = 0;
    /// Format error.
    pub const FORMERR: u16 = 1;
    /// Server failure.
    pub const SERVFAIL: u16 = 2;
    /// Name does not exist.
    pub const NXDOMAIN: u16 = 3;
    /// Not implemented.
    pub const NOTIMP: u16 = 4;
    /// Refused.
    pub const REFUSED: u16 = 5;
    /// A name that should not exist does (RFC 2136; RFC 6672 §2.2: a DNAME substitution
    /// longer than a domain name may be).
    pub const YXDOMAIN: u16 = 6;
    /// Bad EDNS version (extended RCODE, needs an OPT record).
    pub const BADVERS: u16 = 16;
}

/// Length of the OPT record we append (root owner, no options).
pub const OPT_LEN: usize = 11;

/// Size limits of one response.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Limits {
    /// Largest response, in bytes.
    pub max_len: usize,
    /// The UDP payload size we advertise in our OPT record.
    pub our_payload: u16,
}

impl Limits {
    /// Limits for UDP: 512 without EDNS, else `max(512, min(client payload, our payload))`.
    pub fn udp(edns: Option<&Edns>, our_payload: u16) -> Self {
        let max_len = match edns {
            None => 512,
            Some(e) => 512.max(e.payload.min(our_payload) as usize),
        };
        Limits { max_len, our_payload }
    }

    /// Limits for TCP: no truncation below the 65535-byte message limit.
    pub fn tcp(our_payload: u16) -> Self {
        Limits { max_len: 65535, our_payload }
    }
}

/// What [`assemble`] produced.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Assembled {
    /// Full 12-bit RCODE of the response.
    pub rcode: u16,
    /// TC=1 was set (no records sent).
    pub truncated: bool,
    /// The additional section was left out to fit (TC=0).
    pub additional_dropped: bool,
}

/// Why a body cannot be replayed for a query.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AssembleError {
    /// The query has no question.
    NoQuestion,
    /// The question name is shorter than the body's base name.
    BaseMismatch,
    /// A fixup offset lies outside the body or would overflow a pointer.
    BadFixup,
}

impl std::fmt::Display for AssembleError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            AssembleError::NoQuestion => "query has no question",
            AssembleError::BaseMismatch => "question shorter than the body base name",
            AssembleError::BadFixup => "bad fixup in body",
        })
    }
}

impl std::error::Error for AssembleError {}

fn put16(out: &mut Vec<u8>, v: u16) {
    out.extend_from_slice(&v.to_be_bytes());
}

fn set16(out: &mut [u8], at: usize, v: u16) {
    out[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

/// Writes the header (counts zero) and the question; returns nothing, `out` is cleared first.
fn start(q: &Query, flags_extra: u16, question: Option<&Question>, out: &mut Vec<u8>) {
    out.clear();
    put16(out, q.id);
    let mut flags = 0x8000 | ((q.opcode as u16 & 0xF) << 11) | flags_extra;
    if q.rd {
        flags |= 0x0100;
    }
    if q.cd {
        flags |= 0x0010;
    }
    put16(out, flags);
    put16(out, question.is_some() as u16);
    out.extend_from_slice(&[0; 6]);
    if let Some(qq) = question {
        out.extend_from_slice(qq.qname());
        put16(out, qq.qtype);
        put16(out, qq.qclass);
    }
}

/// Appends our OPT record: root owner, our payload, extended RCODE bits, version 0, DO echoed,
/// no options (RFC 6891 §6.1.3, RFC 3225 §3).
fn push_opt(out: &mut Vec<u8>, edns: &Edns, our_payload: u16, rcode: u16) {
    out.push(0);
    put16(out, crate::query::TYPE_OPT);
    put16(out, our_payload);
    out.push((rcode >> 4) as u8);
    out.push(0);
    put16(out, if edns.dnssec_ok { 0x8000 } else { 0 });
    put16(out, 0);
}

/// Writes the response to `q` made of `body` into `out` (cleared first).
pub fn assemble(
    q: &Query,
    body: &Body,
    limits: &Limits,
    out: &mut Vec<u8>,
) -> Result<Assembled, AssembleError> {
    let qq = q.question.as_ref().ok_or(AssembleError::NoQuestion)?;
    let qlen = qq.qname().len();
    let delta = qlen
        .checked_sub(body.base_len as usize)
        .ok_or(AssembleError::BaseMismatch)? as u16;
    let rcode = body.flags & 0x000F;
    let opt_len = if q.edns.is_some() { OPT_LEN } else { 0 };
    let head_len = HEADER_LEN + qlen + 4;
    let an_ns_len = (body.an_ns_len as usize).min(body.bytes.len());
    let (body_len, counts, truncated) = if head_len + body.bytes.len() + opt_len <= limits.max_len {
        (body.bytes.len(), [body.ancount, body.nscount, body.arcount], false)
    } else if head_len + an_ns_len + opt_len <= limits.max_len && !body.ar_required {
        (an_ns_len, [body.ancount, body.nscount, 0], false)
    } else {
        (0, [0, 0, 0], true)
    };
    let tc = if truncated { 0x0200 } else { 0 };
    start(q, (body.flags & 0x040F) | tc, Some(qq), out);
    let body_at = out.len();
    out.extend_from_slice(&body.bytes[..body_len]);
    for &f in &body.fixups {
        let f = f as usize;
        if f + 2 > body_len {
            continue;
        }
        let at = body_at + f;
        let ptr = u16::from_be_bytes([out[at], out[at + 1]]);
        let target = (ptr & 0x3FFF) as usize + delta as usize;
        if ptr & 0xC000 != 0xC000 || target > 0x3FFF {
            out.clear();
            return Err(AssembleError::BadFixup);
        }
        set16(out, at, 0xC000 | target as u16);
    }
    set16(out, 6, counts[0]);
    set16(out, 8, counts[1]);
    let mut arcount = counts[2];
    if let Some(e) = &q.edns {
        push_opt(out, e, limits.our_payload, rcode);
        arcount += 1;
    }
    set16(out, 10, arcount);
    Ok(Assembled { rcode, truncated, additional_dropped: !truncated && body_len < body.bytes.len() })
}

/// Writes an error response with no records into `out` (cleared first): ID, opcode, RD, CD
/// copied; the question echoed if the query has one; an OPT if the query had one (required
/// for BADVERS, whose upper RCODE bits live there). `rcode` is the full 12-bit RCODE.
///
/// An extended RCODE (> 15) for a query without EDNS cannot be expressed; SERVFAIL is sent
/// instead. Returns the RCODE actually sent.
pub fn error_response(q: &Query, rcode: u16, our_payload: u16, out: &mut Vec<u8>) -> u16 {
    let rcode = if rcode > 15 && q.edns.is_none() { rcode::SERVFAIL } else { rcode & 0x0FFF };
    start(q, rcode & 0xF, q.question.as_ref(), out);
    if let Some(e) = &q.edns {
        push_opt(out, e, our_payload, rcode);
        set16(out, 10, 1);
    }
    rcode
}

/// Offset of the question name (for users that patch responses).
pub const QUESTION_AT: usize = QNAME_OFFSET as usize;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::body::{BodyWriter, Section};
    use domain::base::iana::Rcode;
    use domain::base::{Message, ParsedName, Rtype};
    use domain::rdata::AllRecordData;

    fn query(qname: &[u8], qtype: u16, edns: Option<Edns>) -> Query {
        Query {
            id: 0x1234,
            opcode: 0,
            rd: true,
            cd: false,
            qdcount: 1,
            question: Question::new(qname, qtype, 1),
            edns,
            status: crate::query::Status::Ok,
        }
    }

    fn edns(payload: u16) -> Option<Edns> {
        Some(Edns { payload, dnssec_ok: true, version: 0, ext_rcode: 0 })
    }

    /// A body keyed at `wild.example.com` synthesising a TXT answer for the question, a CNAME
    /// at the apex pointing into the base, and additional A records for `ns.wild.example.com`.
    fn wildcard_body(txt_len: usize, ar_required: bool) -> Body {
        let base = b"\x04wild\x07example\x03com\x00";
        let mut w = BodyWriter::new(base).unwrap();
        w.set_aa(true);
        let mut txt = vec![txt_len.min(255) as u8];
        txt.extend(std::iter::repeat_n(b'x', txt_len.min(255)));
        w.write_rr(base, true, 16, 300, &txt).unwrap();
        w.set_section(Section::Authority).unwrap();
        w.write_rr(b"\x07example\x03com\x00", false, 2, 300, b"\x02ns\x04wild\x07example\x03com\x00").unwrap();
        w.set_section(Section::Additional).unwrap();
        w.write_rr(b"\x02ns\x04wild\x07example\x03com\x00", false, 1, 300, &[198, 18, 0, 1]).unwrap();
        w.set_ar_required(ar_required);
        w.finish()
    }

    fn names(msg: &Message<Vec<u8>>) -> Vec<(String, Rtype)> {
        let mut v = Vec::new();
        for sec in [msg.answer().unwrap(), msg.authority().unwrap(), msg.additional().unwrap()] {
            for rr in sec {
                let rr = rr.unwrap().into_record::<AllRecordData<_, ParsedName<_>>>().unwrap().unwrap();
                let mut s = rr.owner().to_string();
                if let AllRecordData::Ns(ns) = rr.data() {
                    s = format!("{s} -> {}", ns.nsdname());
                }
                v.push((s, rr.rtype()));
            }
        }
        v
    }

    #[test]
    fn delta_fixups_and_question_echo() {
        let body = wildcard_body(10, false);
        // Question 2 labels longer than the base, mixed case: delta = 8.
        let q = query(b"\x03FoO\x03bAr\x04wild\x07ExAmPlE\x03com\x00", 16, None);
        let mut out = Vec::new();
        let r = assemble(&q, &body, &Limits::udp(None, 1232), &mut out).unwrap();
        assert_eq!(r, Assembled { rcode: 0, truncated: false, additional_dropped: false });
        let msg = Message::from_octets(out.clone()).unwrap();
        assert_eq!(msg.header().id(), 0x1234);
        assert!(msg.header().qr() && msg.header().aa() && msg.header().rd());
        assert_eq!(&out[12..12 + q.question.as_ref().unwrap().qname().len()], q.question.as_ref().unwrap().qname());
        let got = names(&msg);
        assert_eq!(
            got,
            vec![
                ("FoO.bAr.wild.ExAmPlE.com".to_string(), Rtype::TXT),
                ("ExAmPlE.com -> ns.wild.ExAmPlE.com".to_string(), Rtype::NS),
                ("ns.wild.ExAmPlE.com".to_string(), Rtype::A),
            ]
        );
    }

    #[test]
    fn truncation_table() {
        let q_plain = |payload: Option<u16>| query(b"\x01a\x04wild\x07example\x03com\x00", 16, payload.and_then(edns));
        // (what, txt length, ar_required, client payload, tcp, want: truncated, dropped AR, ancount, arcount)
        type Case = (&'static str, usize, bool, Option<u16>, bool, bool, bool, u16, u16);
        let cases: &[Case] = &[
            ("small fits", 10, false, None, false, false, false, 1, 1),
            ("small fits edns", 10, false, Some(1232), false, false, false, 1, 2),
            // header 12 + q 24 + TXT(2+10+1+255=268)... several TXT sizes
            ("additional dropped without EDNS", 255, false, None, false, false, true, 1, 0),
            ("required additional -> TC", 255, true, None, false, true, false, 0, 0),
            ("required additional fits with EDNS", 255, true, Some(1232), false, false, false, 1, 2),
            ("client payload below 512 means 512", 255, true, Some(100), false, true, false, 0, 1),
            ("tcp never truncates", 255, true, None, true, false, false, 1, 1),
        ];
        for (what, txt, req, payload, tcp, tc, dropped, an, ar) in cases {
            let mut body = wildcard_body(*txt, *req);
            if *txt == 255 {
                // grow the answer so that everything together exceeds 512 but AN+NS alone fit
                let mut w = BodyWriter::new(b"\x04wild\x07example\x03com\x00").unwrap();
                w.set_aa(true);
                w.write_rr(b"\x00", true, 16, 1, &[[255u8].as_slice(), &[b'y'; 255]].concat()).unwrap();
                w.write_rr(b"\x00", true, 16, 1, &[[150u8].as_slice(), &[b'z'; 150]].concat()).unwrap();
                w.set_section(Section::Additional).unwrap();
                w.write_rr(b"\x02ns\x04wild\x07example\x03com\x00", false, 16, 1, &[[60u8].as_slice(), &[b'w'; 60]].concat()).unwrap();
                w.set_ar_required(*req);
                body = w.finish();
                let _ = an;
            }
            let q = q_plain(*payload);
            let limits = if *tcp { Limits::tcp(1232) } else { Limits::udp(q.edns.as_ref(), 1232) };
            let mut out = Vec::new();
            let r = assemble(&q, &body, &limits, &mut out).unwrap();
            assert_eq!(r.truncated, *tc, "{what}");
            assert_eq!(r.additional_dropped, *dropped, "{what}");
            assert!(out.len() <= limits.max_len, "{what}: {} > {}", out.len(), limits.max_len);
            let msg = Message::from_octets(out.clone()).unwrap();
            assert_eq!(msg.header().tc(), *tc, "{what}");
            assert_eq!(msg.header_counts().arcount(), *ar, "{what}");
            if *tc {
                assert_eq!(msg.header_counts().ancount(), 0, "{what}");
            } else {
                assert!(msg.header_counts().ancount() >= 1, "{what}");
            }
            assert_eq!(msg.opt().is_some(), payload.is_some(), "{what}");
            names(&msg);
        }
    }

    #[test]
    fn opt_echoes_do_and_advertises_our_payload() {
        let body = wildcard_body(5, false);
        let q = query(b"\x04wild\x07example\x03com\x00", 16, edns(4096));
        let mut out = Vec::new();
        assemble(&q, &body, &Limits::udp(q.edns.as_ref(), 1232), &mut out).unwrap();
        let msg = Message::from_octets(out).unwrap();
        let opt = msg.opt().unwrap();
        assert_eq!(opt.udp_payload_size(), 1232);
        assert!(opt.dnssec_ok());
        assert_eq!(opt.version(), 0);
    }

    #[test]
    fn error_responses_table() {
        let mut out = Vec::new();
        #[allow(clippy::type_complexity)] // a fixture table: one row a case
        let cases: &[(&str, Option<Edns>, bool, u16, u16, Rcode)] = &[
            ("formerr", None, true, 1, 1, Rcode::FORMERR),
            ("refused with edns", edns(1232), true, 5, 5, Rcode::REFUSED),
            ("notimp no question", None, false, 4, 4, Rcode::NOTIMP),
            ("badvers", Some(Edns { payload: 1232, dnssec_ok: false, version: 1, ext_rcode: 0 }), true, 16, 16, Rcode::NOERROR),
            ("badvers without edns -> servfail", None, true, 16, 2, Rcode::SERVFAIL),
        ];
        for (what, e, with_q, rc, sent, hdr_rcode) in cases {
            let mut q = query(b"\x03www\x07example\x03com\x00", 1, *e);
            if !with_q {
                q.question = None;
            }
            assert_eq!(error_response(&q, *rc, 1232, &mut out), *sent, "{what}");
            let msg = Message::from_octets(out.clone()).unwrap();
            assert_eq!(msg.header().id(), 0x1234, "{what}");
            assert!(msg.header().qr() && msg.header().rd() && !msg.header().aa(), "{what}");
            assert_eq!(msg.header().rcode(), *hdr_rcode, "{what}");
            assert_eq!(msg.header_counts().qdcount(), *with_q as u16, "{what}");
            assert_eq!(msg.opt().is_some(), e.is_some(), "{what}");
            if *rc == 16 && e.is_some() {
                assert_eq!(msg.opt_rcode().to_int(), 16, "{what}");
            }
        }
    }

    #[test]
    fn assemble_rejects_mismatched_inputs() {
        let body = wildcard_body(5, false);
        let mut out = vec![1, 2, 3];
        let short = query(b"\x03com\x00", 1, None);
        assert_eq!(assemble(&short, &body, &Limits::tcp(1232), &mut out), Err(AssembleError::BaseMismatch));
        let mut none = query(b"\x03com\x00", 1, None);
        none.question = None;
        assert_eq!(assemble(&none, &body, &Limits::tcp(1232), &mut out), Err(AssembleError::NoQuestion));
        let mut bad = body.clone();
        bad.fixups.push(0); // byte 0 is a pointer 0xC00C... make it not a pointer:
        bad.bytes[0] = 0;
        let ok = query(b"\x04wild\x07example\x03com\x00", 1, None);
        assert_eq!(assemble(&ok, &bad, &Limits::tcp(1232), &mut out), Err(AssembleError::BadFixup));
        assert!(out.is_empty());
    }
}
