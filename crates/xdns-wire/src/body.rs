//! Response bodies compiled against a base name (see the crate documentation).

/// Answer, authority and additional sections, compiled against a base name.
///
/// Layout assumption while compiling: the question name *is* the base name (wire length
/// `base_len`) at offset 12, so the body starts at `12 + base_len + 4`. At answer time the real
/// question name is `delta = qname_len - base_len` bytes longer; every pointer listed in
/// `fixups` gets `delta` added. The pointer `0xC00C` (the question name itself, used for owners
/// equal to the question, e.g. exact matches and wildcard synthesis) is never listed in
/// `fixups`: offset 12 is the real question name whatever its length.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Body {
    /// Header flags to set in the response: AA (0x0400) and the RCODE (low 4 bits).
    pub flags: u16,
    /// Records in the answer section.
    pub ancount: u16,
    /// Records in the authority section.
    pub nscount: u16,
    /// Records in the additional section (the OPT record is not counted here).
    pub arcount: u16,
    /// The sections, in order.
    pub bytes: Vec<u8>,
    /// Offsets into `bytes` of 2-byte compression pointers that must be shifted by `delta`.
    pub fixups: Vec<u16>,
    /// Length of the answer + authority part of `bytes` (the additional section follows).
    pub an_ns_len: u16,
    /// True if the additional section is required (in-bailiwick glue of a referral, RFC 9471):
    /// when it does not fit, the response is truncated (TC=1) instead of dropping it.
    pub ar_required: bool,
    /// Wire length of the base name this body was compiled against.
    pub base_len: u16,
    /// The body is a DNSSEC-signed zone's DO=0 body: a query with the DO bit gets another
    /// body, with signatures and proofs (the kernel's DO kinds where they depend on the base
    /// only; else built per question in userspace, the kernel passing with `XDNS_PASS_DNSSEC`).
    pub dnssec: bool,
    /// The body is the name's own part of a signed zone's DO=1 NODATA (its NSEC or NSEC3
    /// records and their RRSIGs, pointing into the question only): the whole answer is the
    /// apex's SOA part first, then these bytes (the kernel writes the two parts; bpf/README.md
    /// "Signed zones").
    pub after_apex: bool,
    /// With `after_apex`: the part written first also holds the apex's NSEC3 and its RRSIGs
    /// (the own part's proof is the closest provable encloser proof of RFC 5155 §7.2.4 with
    /// the apex as that encloser: an opt-out delegation's DS NODATA, an empty non-terminal's
    /// NODATA), which the own part then leaves out.
    pub apex_nsec3: bool,
}

use crate::name;
use crate::{HEADER_LEN, PTR_QNAME};

/// The three body sections, in wire order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Section {
    /// Answer section (ANCOUNT).
    Answer,
    /// Authority section (NSCOUNT).
    Authority,
    /// Additional section (ARCOUNT).
    Additional,
}

/// Why a record could not be added to a body.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BodyError {
    /// The base name or an owner name is not a valid uncompressed wire name.
    BadName,
    /// The response would exceed 65535 bytes, or a section count would overflow.
    TooLarge,
    /// Sections must be written in order answer, authority, additional.
    SectionOrder,
}

impl std::fmt::Display for BodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            BodyError::BadName => "invalid name",
            BodyError::TooLarge => "response body too large",
            BodyError::SectionOrder => "sections written out of order",
        })
    }
}

impl std::error::Error for BodyError {}


/// Longest question name: the real question can be this long at answer time, so pointer
/// targets inside the body are only recorded while they stay below 0x3FFF after any shift.
const MAX_QNAME: usize = name::MAX_NAME_LEN;
/// Largest offset a compression pointer can hold.
const MAX_PTR_TARGET: usize = 0x3FFF;
/// Largest DNS message (TCP length prefix).
const MAX_MESSAGE: usize = 65535;

/// Builds a [`Body`] against a base name with RFC 1035 §4.1.4 compression.
///
/// Pointer targets are the suffixes of the base name in the question (offset `12 + j`) and the
/// names already written in the body; every pointer except `0xC00C` for owners equal to the
/// question (`is_qname`) is recorded in [`Body::fixups`].
#[derive(Clone, Debug)]
pub struct BodyWriter {
    body: Body,
    section: Section,
    /// Known names (lowercased) and the message offset where they start, at delta 0.
    dict: Vec<(Box<[u8]>, u16)>,
    additional_started: bool,
    /// Names written become pointer targets (else only the base name's suffixes are).
    new_targets: bool,
}

impl BodyWriter {
    /// Starts an empty body for the base name `base` (a valid uncompressed wire name; its
    /// letter case does not matter).
    pub fn new(base: &[u8]) -> Result<Self, BodyError> {
        if !name::is_valid(base) {
            return Err(BodyError::BadName);
        }
        let mut dict = Vec::new();
        for j in name::suffix_offsets(base) {
            if base[j] != 0 {
                dict.push((name::to_key(&base[j..]), (HEADER_LEN + j) as u16));
            }
        }
        Ok(BodyWriter {
            body: Body { base_len: base.len() as u16, ..Body::default() },
            section: Section::Answer,
            dict,
            additional_started: false,
            new_targets: true,
        })
    }

    /// [`Self::new`] for a body whose bytes may be sent after other bytes than the question
    /// (a part of an answer): names compress only against the base name's suffixes in the
    /// question, never against names written in the body, so no pointer depends on where the
    /// body lands.
    pub fn new_part(base: &[u8]) -> Result<Self, BodyError> {
        Ok(BodyWriter { new_targets: false, ..Self::new(base)? })
    }

    /// Sets the AA bit.
    pub fn set_aa(&mut self, aa: bool) {
        self.body.flags = (self.body.flags & !0x0400) | if aa { 0x0400 } else { 0 };
    }

    /// Sets the RCODE (low 4 bits of the header; the body never carries extended RCODEs).
    pub fn set_rcode(&mut self, rcode: u8) {
        self.body.flags = (self.body.flags & !0x000F) | (rcode as u16 & 0x000F);
    }

    /// Marks the additional section as required (in-domain referral glue, RFC 9471).
    pub fn set_ar_required(&mut self, required: bool) {
        self.body.ar_required = required;
    }

    /// The section records are currently written to.
    pub fn section(&self) -> Section {
        self.section
    }

    /// Moves on to `section`; going back to an earlier section is an error.
    pub fn set_section(&mut self, section: Section) -> Result<(), BodyError> {
        if section < self.section {
            return Err(BodyError::SectionOrder);
        }
        if section == Section::Additional && !self.additional_started {
            self.additional_started = true;
            self.body.an_ns_len = self.body.bytes.len() as u16;
        }
        self.section = section;
        Ok(())
    }

    /// Number of records written so far to all sections.
    pub fn record_count(&self) -> usize {
        self.body.ancount as usize + self.body.nscount as usize + self.body.arcount as usize
    }

    /// Message offset of body byte `at`, assuming the question is the base name (delta 0).
    fn msg_offset(&self, at: usize) -> usize {
        HEADER_LEN + self.body.base_len as usize + 4 + at
    }

    fn push_pointer(&mut self, target: u16, fixup: bool) {
        if fixup {
            self.body.fixups.push(self.body.bytes.len() as u16);
        }
        self.body.bytes.extend_from_slice(&(0xC000 | target).to_be_bytes());
    }

    /// Writes `nm` (valid uncompressed) compressed against the dictionary, recording the new
    /// suffixes it introduces as pointer targets.
    fn write_name_compressed(&mut self, nm: &[u8]) {
        let mut literal_ends = nm.len();
        let mut target = None;
        for j in name::suffix_offsets(nm) {
            if nm[j] == 0 {
                literal_ends = j;
                break;
            }
            let key = name::to_key(&nm[j..]);
            if let Some((_, off)) = self.dict.iter().find(|(k, _)| **k == *key) {
                literal_ends = j;
                target = Some(*off);
                break;
            }
        }
        let start = self.body.bytes.len();
        for j in name::suffix_offsets(&nm[..literal_ends.min(nm.len())]) {
            if j >= literal_ends {
                break;
            }
            // Only targets that stay addressable whatever the real question length is.
            let off = self.msg_offset(start + j) + (MAX_QNAME - self.body.base_len as usize);
            if off <= MAX_PTR_TARGET && self.new_targets {
                let at = self.msg_offset(start + j) as u16;
                self.dict.push((name::to_key(&nm[j..]), at));
            }
        }
        self.body.bytes.extend_from_slice(&nm[..literal_ends]);
        match target {
            Some(t) => self.push_pointer(t, true),
            None => self.body.bytes.push(0),
        }
    }

    /// Writes RDATA of type `rtype`, compressing embedded names of the well-known types only.
    /// RDATA that does not have the expected shape is copied unchanged.
    ///
    /// The types whose RDATA names are compressed: the RFC 1035 types NS, CNAME, PTR, MX and
    /// SOA (RFC 3597 §4; MB, MG, MR, MINFO and MD/MF are obsolete and left uncompressed). Not
    /// DNAME, whose target must not be compressed (RFC 6672 §2.5), nor any newer type.
    fn write_rdata(&mut self, rtype: u16, rdata: &[u8]) {
        use crate::rtype::{CNAME, MX, NS, PTR, SOA};
        match rtype {
            NS | CNAME | PTR if name::is_valid(rdata) => {
                self.write_name_compressed(rdata);
            }
            MX if rdata.len() > 2 && name::is_valid(&rdata[2..]) => {
                self.body.bytes.extend_from_slice(&rdata[..2]);
                self.write_name_compressed(&rdata[2..]);
            }
            SOA => {
                let m = name::name_len(rdata).ok();
                let r = m.and_then(|m| name::name_len(&rdata[m..]).ok().map(|r| (m, r)));
                match r {
                    Some((m, r)) if rdata.len() == m + r + 20 => {
                        self.write_name_compressed(&rdata[..m]);
                        self.write_name_compressed(&rdata[m..m + r]);
                        self.body.bytes.extend_from_slice(&rdata[m + r..]);
                    }
                    _ => self.body.bytes.extend_from_slice(rdata),
                }
            }
            _ => self.body.bytes.extend_from_slice(rdata),
        }
    }

    /// Appends one record (class IN) to the current section.
    ///
    /// `owner` is an uncompressed wire name; if `is_qname`, the owner is the question name
    /// itself and is written as the pointer `0xC00C` (not a fixup) whatever `owner` holds.
    pub fn write_rr(
        &mut self,
        owner: &[u8],
        is_qname: bool,
        rtype: u16,
        ttl: u32,
        rdata: &[u8],
    ) -> Result<(), BodyError> {
        if !is_qname && !name::is_valid(owner) {
            return Err(BodyError::BadName);
        }
        // Worst case growth: owner + fixed part + RDATA (compression only shrinks).
        let worst = owner.len() + 10 + rdata.len();
        if self.msg_offset(self.body.bytes.len()) + (MAX_QNAME - self.body.base_len as usize) + worst
            + 11
            > MAX_MESSAGE
        {
            return Err(BodyError::TooLarge);
        }
        let counter = match self.section {
            Section::Answer => &mut self.body.ancount,
            Section::Authority => &mut self.body.nscount,
            Section::Additional => &mut self.body.arcount,
        };
        *counter = counter.checked_add(1).ok_or(BodyError::TooLarge)?;
        if is_qname {
            self.body.bytes.extend_from_slice(&PTR_QNAME.to_be_bytes());
        } else {
            self.write_name_compressed(owner);
        }
        self.body.bytes.extend_from_slice(&rtype.to_be_bytes());
        self.body.bytes.extend_from_slice(&1u16.to_be_bytes());
        self.body.bytes.extend_from_slice(&ttl.to_be_bytes());
        let len_at = self.body.bytes.len();
        self.body.bytes.extend_from_slice(&[0, 0]);
        self.write_rdata(rtype, rdata);
        let rdlen = (self.body.bytes.len() - len_at - 2) as u16;
        self.body.bytes[len_at..len_at + 2].copy_from_slice(&rdlen.to_be_bytes());
        Ok(())
    }

    /// Finishes the body.
    pub fn finish(mut self) -> Body {
        if !self.additional_started {
            self.body.an_ns_len = self.body.bytes.len() as u16;
        }
        self.body
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &[u8] = b"\x03www\x07example\x03com\x00"; // 17 bytes: body starts at 33

    #[test]
    fn owner_and_rdata_compression_table() {
        // (what, owner, is_qname, rtype, rdata, expected record bytes, expected fixups relative
        // to the record start)
        type Case = (&'static str, &'static [u8], bool, u16, &'static [u8], &'static [u8], &'static [usize]);
        let cases: &[Case] = &[
            (
                "qname owner A",
                BASE, true, 1, b"\xc6\x12\x00\x0a",
                b"\xc0\x0c\x00\x01\x00\x01\x00\x00\x0e\x10\x00\x04\xc6\x12\x00\x0a",
                &[],
            ),
            (
                "owner = base, not qname: pointer is a fixup",
                BASE, false, 1, b"\x01\x02\x03\x04",
                b"\xc0\x0c\x00\x01\x00\x01\x00\x00\x0e\x10\x00\x04\x01\x02\x03\x04",
                &[0],
            ),
            (
                "apex owner, SOA both names compressed",
                b"\x07example\x03com\x00", false, 6,
                b"\x03ns1\x07example\x03com\x00\x0ahostmaster\x07example\x03com\x00\x00\x00\x00\x01\x00\x00\x00\x02\x00\x00\x00\x03\x00\x00\x00\x04\x00\x00\x00\x05",
                b"\xc0\x10\x00\x06\x00\x01\x00\x00\x0e\x10\x00\x27\x03ns1\xc0\x10\x0ahostmaster\xc0\x10\x00\x00\x00\x01\x00\x00\x00\x02\x00\x00\x00\x03\x00\x00\x00\x04\x00\x00\x00\x05",
                &[0, 16, 29],
            ),
            (
                "MX with mixed case target compressed case-insensitively",
                BASE, true, 15, b"\x00\x0a\x04Mail\x07Example\x03COM\x00",
                b"\xc0\x0c\x00\x0f\x00\x01\x00\x00\x0e\x10\x00\x09\x00\x0a\x04Mail\xc0\x10",
                &[19],
            ),
            (
                "SRV target never compressed (RFC 3597 §4)",
                BASE, true, 33, b"\x00\x01\x00\x02\x00\x03\x03sip\x07example\x03com\x00",
                b"\xc0\x0c\x00\x21\x00\x01\x00\x00\x0e\x10\x00\x17\x00\x01\x00\x02\x00\x03\x03sip\x07example\x03com\x00",
                &[],
            ),
            (
                "out-of-zone CNAME target written in full",
                BASE, true, 5, b"\x03www\x07example\x03net\x00",
                b"\xc0\x0c\x00\x05\x00\x01\x00\x00\x0e\x10\x00\x11\x03www\x07example\x03net\x00",
                &[],
            ),
            (
                "malformed NS rdata copied raw",
                BASE, true, 2, b"\x05ab",
                b"\xc0\x0c\x00\x02\x00\x01\x00\x00\x0e\x10\x00\x03\x05ab",
                &[],
            ),
        ];
        for (what, owner, is_q, rtype, rdata, want, fix) in cases {
            let mut w = BodyWriter::new(BASE).unwrap();
            w.write_rr(owner, *is_q, *rtype, 3600, rdata).unwrap();
            let b = w.finish();
            assert_eq!(b.bytes, *want, "{what}");
            assert_eq!(b.fixups, fix.iter().map(|&f| f as u16).collect::<Vec<_>>(), "{what}");
            assert_eq!((b.ancount, b.nscount, b.arcount), (1, 0, 0), "{what}");
            assert_eq!(b.an_ns_len as usize, b.bytes.len(), "{what}");
            assert_eq!(b.base_len, 17, "{what}");
        }
    }

    #[test]
    fn names_written_in_body_become_targets() {
        let mut w = BodyWriter::new(BASE).unwrap();
        // CNAME www.example.com -> a.b.example.net (new name at body offset 12)
        w.write_rr(BASE, true, 5, 60, b"\x01a\x01b\x07example\x03net\x00").unwrap();
        w.set_section(Section::Additional).unwrap();
        // owner b.example.net: must point at body offset 14 = message offset 33 + 14 = 47
        w.write_rr(b"\x01b\x07example\x03net\x00", false, 1, 60, b"\x01\x02\x03\x04").unwrap();
        let b = w.finish();
        assert_eq!(b.an_ns_len, 12 + 17);
        assert_eq!(&b.bytes[29..31], &(0xC000u16 | 47).to_be_bytes());
        assert_eq!(b.fixups, vec![29]);
        assert_eq!((b.ancount, b.nscount, b.arcount), (1, 0, 1));
    }

    #[test]
    fn sections_flags_and_errors() {
        let mut w = BodyWriter::new(BASE).unwrap();
        w.set_aa(true);
        w.set_rcode(3);
        w.set_ar_required(true);
        w.set_section(Section::Authority).unwrap();
        assert_eq!(w.set_section(Section::Answer), Err(BodyError::SectionOrder));
        assert_eq!(w.write_rr(b"\x05ab", false, 1, 0, b""), Err(BodyError::BadName));
        w.write_rr(BASE, false, 1, 0, b"").unwrap();
        let b = w.finish();
        assert_eq!(b.flags, 0x0403);
        assert!(b.ar_required);
        assert_eq!((b.ancount, b.nscount, b.arcount), (0, 1, 0));
        assert!(BodyWriter::new(b"\x03ab").is_err());
    }

    #[test]
    fn body_size_is_bounded() {
        let mut w = BodyWriter::new(BASE).unwrap();
        let rdata = vec![7u8; 60000];
        w.write_rr(BASE, true, 16, 0, &rdata).unwrap();
        assert_eq!(w.write_rr(BASE, true, 16, 0, &rdata), Err(BodyError::TooLarge));
        assert_eq!(w.record_count(), 1);
    }
}
