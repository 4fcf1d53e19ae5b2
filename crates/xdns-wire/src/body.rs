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
    pub ancount: u16,
    pub nscount: u16,
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
}

