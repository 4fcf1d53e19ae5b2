//! Parsing an incoming query: header, the one question, and EDNS (RFC 1035 §4.1, RFC 6891).
//!
//! [`Query::parse`] separates three fates of a message:
//! - **drop** ([`ParseError`]): shorter than a header, QR=1 (a response), or a question that
//!   cannot be read. Nothing trustworthy to answer to; answering responses invites loops.
//! - **answer with an error** ([`Status::FormErr`], [`Status::NotImp`]): the header and, where
//!   possible, the question are known, so the error echoes them.
//! - **answer** ([`Status::Ok`]).
//!
//! Choices (compared with Knot DNS 3.2 and NSD 4.6, which differ here):
//! - QDCOUNT = 0 or > 1: FORMERR without a question section (NSD; Knot drops QDCOUNT > 1).
//! - Records in the answer and authority sections of a QUERY are skipped if they parse and
//!   ignored (RFC 1035 does not forbid them; Knot does the same). If they do not parse:
//!   FORMERR with the question echoed (Knot).
//! - Bytes after the last record: FORMERR (Knot; NSD ignores them).
//! - More than one OPT: FORMERR (RFC 6891 §6.1.1), without OPT in the response (Knot).
//!   An OPT with a non-root owner is accepted (Knot) — it is not worth refusing service over.
//!   Malformed EDNS options (an option overrunning RDATA): FORMERR.
//! - Opcode other than QUERY: NOTIMP, question echoed when it parses (Knot); the rest of the
//!   message is not examined, EDNS is not parsed.
//! - A compression pointer inside the question name is followed (strictly backwards); the
//!   name is kept decompressed, letter case as sent, and echoed decompressed.

use crate::name::{self, MAX_NAME_LEN};
use crate::HEADER_LEN;

/// Why a message is dropped without any response.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ParseError {
    /// Shorter than the 12-byte header.
    Short,
    /// QR=1: a response, never answered.
    Response,
    /// The (first) question could not be read.
    BadQuestion,
}

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ParseError::Short => "shorter than a DNS header",
            ParseError::Response => "QR bit set",
            ParseError::BadQuestion => "unparsable question",
        })
    }
}

impl std::error::Error for ParseError {}

/// How the query must be answered, as far as parsing can tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Status {
    /// Well-formed: look it up.
    Ok,
    /// Answer FORMERR.
    FormErr,
    /// Answer NOTIMP (opcode other than QUERY).
    NotImp,
}

/// The question of a query.
#[derive(Clone, PartialEq, Eq)]
pub struct Question {
    name: [u8; MAX_NAME_LEN],
    key: [u8; MAX_NAME_LEN],
    len: u8,
    /// QTYPE.
    pub qtype: u16,
    /// QCLASS.
    pub qclass: u16,
}

impl Question {
    /// Builds a question from an uncompressed wire name (case kept). `None` if the name is
    /// not exactly one valid wire name.
    pub fn new(qname: &[u8], qtype: u16, qclass: u16) -> Option<Self> {
        if !name::is_valid(qname) {
            return None;
        }
        let mut q = Question {
            name: [0; MAX_NAME_LEN],
            key: [0; MAX_NAME_LEN],
            len: qname.len() as u8,
            qtype,
            qclass,
        };
        q.name[..qname.len()].copy_from_slice(qname);
        for (k, b) in q.key.iter_mut().zip(qname) {
            *k = b.to_ascii_lowercase();
        }
        Some(q)
    }

    /// The question name, uncompressed, letter case as the client sent it.
    pub fn qname(&self) -> &[u8] {
        &self.name[..self.len as usize]
    }

    /// The question name lowercased: the lookup key.
    pub fn key(&self) -> &[u8] {
        &self.key[..self.len as usize]
    }
}

impl std::fmt::Debug for Question {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Question")
            .field("qname", &name::to_presentation(self.qname()))
            .field("qtype", &self.qtype)
            .field("qclass", &self.qclass)
            .finish()
    }
}

/// The EDNS parameters of a query's OPT record (RFC 6891 §6.1.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Edns {
    /// Requestor's UDP payload size as sent (values below 512 are treated as 512 when used).
    pub payload: u16,
    /// The DO bit (RFC 3225).
    pub dnssec_ok: bool,
    /// EDNS version.
    pub version: u8,
    /// Upper 8 bits of the extended RCODE (meaningless in a query, kept for completeness).
    pub ext_rcode: u8,
}

/// A parsed query.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Query {
    /// Message ID.
    pub id: u16,
    /// OPCODE (4 bits).
    pub opcode: u8,
    /// Recursion desired: copied into the response.
    pub rd: bool,
    /// Checking disabled: copied into the response.
    pub cd: bool,
    /// QDCOUNT as sent.
    pub qdcount: u16,
    /// The question, when QDCOUNT = 1 (or when it parsed for a NOTIMP answer).
    pub question: Option<Question>,
    /// EDNS, when one OPT record was found.
    pub edns: Option<Edns>,
    /// How to answer.
    pub status: Status,
}

/// RR type of OPT (kept under this name for its users; [`crate::rtype::OPT`]).
pub const TYPE_OPT: u16 = crate::rtype::OPT;

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

/// Skips one resource record at `pos`; returns (owner is root, rtype, class, ttl, rdata range,
/// end). Owner may be compressed.
fn read_rr(msg: &[u8], pos: usize) -> Option<(bool, u16, u16, u32, std::ops::Range<usize>)> {
    let mut owner = Vec::new();
    let p = name::read_name(msg, pos, &mut owner).ok()?;
    let rtype = be16(msg, p)?;
    let class = be16(msg, p + 2)?;
    let ttl = (be16(msg, p + 4)? as u32) << 16 | be16(msg, p + 6)? as u32;
    let rdlen = be16(msg, p + 8)? as usize;
    let start = p + 10;
    let end = start + rdlen;
    if end > msg.len() {
        return None;
    }
    Some((owner == name::ROOT, rtype, class, ttl, start..end))
}

/// EDNS options are a sequence of (code, length, data); true if they tile `data` exactly.
fn options_well_formed(data: &[u8]) -> bool {
    let mut pos = 0usize;
    while pos < data.len() {
        let Some(len) = be16(data, pos + 2) else { return false };
        pos += 4 + len as usize;
    }
    pos == data.len()
}

impl Query {
    /// Parses a query message. See the module documentation for the drop / error rules.
    pub fn parse(msg: &[u8]) -> Result<Query, ParseError> {
        if msg.len() < HEADER_LEN {
            return Err(ParseError::Short);
        }
        let flags = u16::from_be_bytes([msg[2], msg[3]]);
        if flags & 0x8000 != 0 {
            return Err(ParseError::Response);
        }
        let count = |i: usize| u16::from_be_bytes([msg[i], msg[i + 1]]);
        let (qdcount, ancount, nscount, arcount) = (count(4), count(6), count(8), count(10));
        let mut q = Query {
            id: u16::from_be_bytes([msg[0], msg[1]]),
            opcode: ((flags >> 11) & 0xF) as u8,
            rd: flags & 0x0100 != 0,
            cd: flags & 0x0010 != 0,
            qdcount,
            question: None,
            edns: None,
            status: Status::Ok,
        };
        if q.opcode != 0 {
            q.status = Status::NotImp;
            if qdcount == 1 {
                q.question = read_question(msg, HEADER_LEN).map(|(qq, _)| qq);
            }
            return Ok(q);
        }
        if qdcount != 1 {
            q.status = Status::FormErr;
            return Ok(q);
        }
        let (question, mut pos) = read_question(msg, HEADER_LEN).ok_or(ParseError::BadQuestion)?;
        q.question = Some(question);
        for _ in 0..(ancount as u32 + nscount as u32) {
            match read_rr(msg, pos) {
                Some((_, _, _, _, rd)) => pos = rd.end,
                None => {
                    q.status = Status::FormErr;
                    return Ok(q);
                }
            }
        }
        for _ in 0..arcount {
            let Some((_root, rtype, class, ttl, rd)) = read_rr(msg, pos) else {
                q.status = Status::FormErr;
                return Ok(q);
            };
            pos = rd.end;
            if rtype == TYPE_OPT {
                if q.edns.is_some() || !options_well_formed(&msg[rd]) {
                    q.edns = None;
                    q.status = Status::FormErr;
                    return Ok(q);
                }
                q.edns = Some(Edns {
                    payload: class,
                    ext_rcode: (ttl >> 24) as u8,
                    version: (ttl >> 16) as u8,
                    dnssec_ok: ttl & 0x8000 != 0,
                });
            }
        }
        if pos != msg.len() {
            q.status = Status::FormErr;
        }
        Ok(q)
    }
}

/// Reads a question at `pos`; returns it and the position after QTYPE/QCLASS.
fn read_question(msg: &[u8], pos: usize) -> Option<(Question, usize)> {
    let mut qname = Vec::with_capacity(64);
    let p = name::read_name(msg, pos, &mut qname).ok()?;
    let qtype = be16(msg, p)?;
    let qclass = be16(msg, p + 2)?;
    Some((Question::new(&qname, qtype, qclass)?, p + 4))
}

#[cfg(test)]
mod tests {
    use super::*;

    const WWW: &[u8] = b"\x03WwW\x07example\x03com\x00";

    fn msg(id: u16, flags: u16, counts: [u16; 4], rest: &[&[u8]]) -> Vec<u8> {
        let mut m = Vec::new();
        m.extend_from_slice(&id.to_be_bytes());
        m.extend_from_slice(&flags.to_be_bytes());
        for c in counts {
            m.extend_from_slice(&c.to_be_bytes());
        }
        for r in rest {
            m.extend_from_slice(r);
        }
        m
    }

    const Q_A: &[u8] = b"\x00\x01\x00\x01";
    const OPT_1232_DO: &[u8] = b"\x00\x00\x29\x04\xd0\x00\x00\x80\x00\x00\x00";
    const OPT_V1: &[u8] = b"\x00\x00\x29\x04\xd0\x00\x01\x00\x00\x00\x00";
    const OPT_COOKIE: &[u8] = b"\x00\x00\x29\x10\x00\x00\x00\x00\x00\x00\x0c\x00\x0a\x00\x08abcdefgh";
    const OPT_BAD_OPTION: &[u8] = b"\x00\x00\x29\x10\x00\x00\x00\x00\x00\x00\x05\x00\x0a\x00\x08a";
    const RR_A: &[u8] = b"\xc0\x0c\x00\x01\x00\x01\x00\x00\x00\x0a\x00\x04\xc6\x12\x00\x01";

    #[test]
    fn drops() {
        let cases: &[(&str, Vec<u8>, ParseError)] = &[
            ("empty", vec![], ParseError::Short),
            ("11 bytes", vec![0; 11], ParseError::Short),
            ("QR=1", msg(1, 0x8000, [1, 0, 0, 0], &[WWW, Q_A]), ParseError::Response),
            ("no qtype", msg(1, 0, [1, 0, 0, 0], &[WWW, b"\x00\x01"]), ParseError::BadQuestion),
            ("truncated name", msg(1, 0, [1, 0, 0, 0], &[b"\x03ww"]), ParseError::BadQuestion),
            ("pointer loop", msg(1, 0, [1, 0, 0, 0], &[b"\xc0\x0c", Q_A]), ParseError::BadQuestion),
            ("missing question", msg(1, 0, [1, 0, 0, 0], &[]), ParseError::BadQuestion),
        ];
        for (what, m, want) in cases {
            assert_eq!(Query::parse(m), Err(*want), "{what}");
        }
    }

    #[test]
    fn statuses_and_edns() {
        type Case = (&'static str, Vec<u8>, Status, bool, Option<Edns>);
        let edns_do = Edns { payload: 1232, dnssec_ok: true, version: 0, ext_rcode: 0 };
        let cases: Vec<Case> = vec![
            ("plain", msg(7, 0x0100, [1, 0, 0, 0], &[WWW, Q_A]), Status::Ok, true, None),
            ("edns do", msg(7, 0, [1, 0, 0, 1], &[WWW, Q_A, OPT_1232_DO]), Status::Ok, true, Some(edns_do)),
            (
                "edns v1",
                msg(7, 0, [1, 0, 0, 1], &[WWW, Q_A, OPT_V1]),
                Status::Ok,
                true,
                Some(Edns { payload: 1232, dnssec_ok: false, version: 1, ext_rcode: 0 }),
            ),
            (
                "cookie option",
                msg(7, 0, [1, 0, 0, 1], &[WWW, Q_A, OPT_COOKIE]),
                Status::Ok,
                true,
                Some(Edns { payload: 4096, dnssec_ok: false, version: 0, ext_rcode: 0 }),
            ),
            ("bad option", msg(7, 0, [1, 0, 0, 1], &[WWW, Q_A, OPT_BAD_OPTION]), Status::FormErr, true, None),
            ("two OPT", msg(7, 0, [1, 0, 0, 2], &[WWW, Q_A, OPT_1232_DO, OPT_1232_DO]), Status::FormErr, true, None),
            ("answer rr tolerated", msg(7, 0, [1, 1, 0, 0], &[WWW, Q_A, RR_A]), Status::Ok, true, None),
            ("authority rr tolerated", msg(7, 0, [1, 0, 1, 1], &[WWW, Q_A, RR_A, OPT_1232_DO]), Status::Ok, true, Some(edns_do)),
            ("answer count lies", msg(7, 0, [1, 2, 0, 0], &[WWW, Q_A, RR_A]), Status::FormErr, true, None),
            ("arcount lies", msg(7, 0, [1, 0, 0, 1], &[WWW, Q_A]), Status::FormErr, true, None),
            ("trailing garbage", msg(7, 0, [1, 0, 0, 0], &[WWW, Q_A, b"\xde\xad"]), Status::FormErr, true, None),
            ("qdcount 0", msg(7, 0, [0, 0, 0, 0], &[]), Status::FormErr, false, None),
            ("qdcount 2", msg(7, 0, [2, 0, 0, 0], &[WWW, Q_A, WWW, Q_A]), Status::FormErr, false, None),
            ("opcode status", msg(7, 2 << 11, [1, 0, 0, 0], &[WWW, Q_A]), Status::NotImp, true, None),
            ("opcode update garbage", msg(7, 5 << 11, [1, 0, 0, 0], &[b"\xff"]), Status::NotImp, false, None),
        ];
        for (what, m, status, has_q, edns) in cases {
            let q = Query::parse(&m).unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(q.id, 7, "{what}");
            assert_eq!(q.status, status, "{what}");
            assert_eq!(q.question.is_some(), has_q, "{what}");
            assert_eq!(q.edns, edns, "{what}");
        }
    }

    #[test]
    fn header_and_question_fields() {
        // RD + CD + AD + TC (TC/AD ignored)
        let m = msg(0xBEEF, 0x0100 | 0x0010 | 0x0020 | 0x0200, [1, 0, 0, 0], &[WWW, b"\x00\x1c\x00\x01"]);
        let q = Query::parse(&m).unwrap();
        assert_eq!((q.id, q.opcode, q.rd, q.cd), (0xBEEF, 0, true, true));
        let qq = q.question.unwrap();
        assert_eq!(qq.qname(), WWW);
        assert_eq!(qq.key(), b"\x03www\x07example\x03com\x00");
        assert_eq!((qq.qtype, qq.qclass), (28, 1));
    }

    #[test]
    fn compressed_question_is_decompressed() {
        // The name "\x03com\x00" is placed in the ID+flags... not possible; instead a pointer
        // to a label inside the header bytes: header bytes 4..: qdcount=1 (0x00 0x01)? Use a
        // crafted header whose ARCOUNT bytes (10,11) read "\x00" root: pointer to 11 = root.
        let mut m = msg(7, 0, [1, 0, 0, 0], &[b"\x03www\xc0\x0b", Q_A]);
        m[11] = 0; // arcount low byte is 0 = root label
        let q = Query::parse(&m).unwrap();
        assert_eq!(q.question.unwrap().qname(), b"\x03www\x00");
        assert_eq!(q.status, Status::Ok);
    }

    #[test]
    fn cross_check_with_domain() {
        use domain::base::{Message, MessageBuilder, Name, Rtype};
        use std::str::FromStr;
        let mut b = MessageBuilder::new_vec().question();
        b.header_mut().set_id(4242);
        b.header_mut().set_rd(true);
        b.push((Name::<Vec<u8>>::from_str("Mail.Example.COM.").unwrap(), Rtype::MX)).unwrap();
        let mut ar = b.additional();
        ar.opt(|o| {
            o.set_udp_payload_size(1400);
            o.set_dnssec_ok(true);
            Ok(())
        })
        .unwrap();
        let wire = ar.finish();
        assert!(Message::from_octets(wire.clone()).is_ok());
        let q = Query::parse(&wire).unwrap();
        assert_eq!(q.status, Status::Ok);
        assert_eq!(q.id, 4242);
        assert!(q.rd);
        let qq = q.question.unwrap();
        assert_eq!(qq.qname(), b"\x04Mail\x07Example\x03COM\x00");
        assert_eq!(qq.qtype, 15);
        assert_eq!(q.edns.unwrap().payload, 1400);
        assert!(q.edns.unwrap().dnssec_ok);
    }
}
