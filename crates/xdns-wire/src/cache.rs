//! The contract between the recursive resolver and the kernel answer cache.
//!
//! The resolver (`xdns-resolver`) decides *what* to cache and for how long; the XDP cache
//! (`xdns-bpf`) decides *how* to store and replay it. Neither depends on the other: both speak
//! these types, and the daemon plugs an implementation of [`AnswerCache`] into the resolver.
//!
//! Times are `CLOCK_MONOTONIC` nanoseconds, the clock of `bpf_ktime_get_ns()`, so the kernel
//! compares them with its own clock without conversion.

use crate::Body;

/// One cached answer: the body that follows the question for `(qname, qtype, dnssec_ok)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CachedAnswer {
    /// The question name, lowercased, uncompressed wire form.
    pub qname: Vec<u8>,
    /// The question type.
    pub qtype: u16,
    /// The DO bit of the queries this answer is for (RFC 3225: a DO=0 answer carries no
    /// DNSSEC records the client did not ask for).
    pub dnssec_ok: bool,
    /// Answer, authority and additional sections, compiled with `BodyWriter::new(&qname)`.
    /// `flags` holds the RCODE; AA is clear. The replaying side sets QR, RA, the client's RD
    /// and ID, and echoes the question as the client sent it. Every record's TTL is the value
    /// it had at `stored_at_ns`.
    pub body: Body,
    /// When the TTLs in `body` were exact. A reply at time `t` carries each TTL reduced by
    /// `(t - stored_at_ns)` whole seconds.
    pub stored_at_ns: u64,
    /// The answer is never served at or after this time (the smallest TTL has run out).
    pub expires_at_ns: u64,
    /// A hit at or after this time asks the resolver to refresh the entry (proactive refresh,
    /// once per entry); `u64::MAX` = never.
    pub prefetch_at_ns: u64,
}

/// The key of a cached answer.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CacheKey {
    /// Lowercased, uncompressed wire name.
    pub qname: Vec<u8>,
    /// The question type.
    pub qtype: u16,
    /// The DO bit.
    pub dnssec_ok: bool,
}

/// Where the resolver puts answers so that they are served without it (the XDP cache).
///
/// Implementations must be cheap to call from the resolver's tasks; errors are logged by the
/// caller and never fail a resolution (the userspace cache still answers).
pub trait AnswerCache: Send + Sync {
    /// Installs or replaces the answer for its key.
    fn insert(&self, answer: &CachedAnswer) -> Result<(), String>;
    /// Removes the answer for `key`, if any.
    fn remove(&self, key: &CacheKey) -> Result<(), String>;
    /// Removes every answer, also those the caller no longer knows of (`xdns flush`);
    /// returns how many were removed. By default unsupported: the caller then removes the
    /// keys it knows one by one.
    fn clear(&self) -> Result<usize, String> {
        Err("clearing is not supported".into())
    }
    /// Removes the answers whose question name (lowercased wire form) `matches`, also those
    /// the caller no longer knows of (`xdns flush NAME`); returns how many were removed. By
    /// default unsupported, as [`AnswerCache::clear`].
    fn remove_names(&self, _matches: &dyn Fn(&[u8]) -> bool) -> Result<usize, String> {
        Err("removing by name is not supported".into())
    }
    /// Its own gauges and counters, named for `xdns stats` (none by default).
    fn stats(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
}

/// An [`AnswerCache`] that stores nothing (no XDP attached).
#[derive(Clone, Copy, Debug, Default)]
pub struct NoCache;

impl AnswerCache for NoCache {
    fn insert(&self, _: &CachedAnswer) -> Result<(), String> {
        Ok(())
    }
    fn remove(&self, _: &CacheKey) -> Result<(), String> {
        Ok(())
    }
    fn clear(&self) -> Result<usize, String> {
        Ok(0)
    }
    fn remove_names(&self, _: &dyn Fn(&[u8]) -> bool) -> Result<usize, String> {
        Ok(0)
    }
}

impl CachedAnswer {
    /// The key this answer is stored under.
    pub fn key(&self) -> CacheKey {
        CacheKey { qname: self.qname.clone(), qtype: self.qtype, dnssec_ok: self.dnssec_ok }
    }

    /// May this answer be served at `now_ns`? (Never at or after `expires_at_ns`.)
    pub fn is_fresh(&self, now_ns: u64) -> bool {
        now_ns < self.expires_at_ns
    }
}

/// Nanoseconds per second.
const NS_PER_S: u64 = 1_000_000_000;

/// Whole seconds between `stored_at_ns` and `now_ns` (0 if `now_ns` is earlier), saturated to
/// `u32`: what every TTL of a replayed answer is reduced by (the XDP cache computes the same).
pub fn elapsed_secs(stored_at_ns: u64, now_ns: u64) -> u32 {
    (now_ns.saturating_sub(stored_at_ns) / NS_PER_S).min(u64::from(u32::MAX)) as u32
}

/// Offsets into `body.bytes` of the 4-byte TTL of every record (answer, authority, additional,
/// in order; ascending). `None` if the bytes do not hold exactly `ancount + nscount + arcount`
/// well-formed records (owner names may end in compression pointers).
pub fn ttl_offsets(body: &Body) -> Option<Vec<u16>> {
    let b = &body.bytes;
    let n = usize::from(body.ancount) + usize::from(body.nscount) + usize::from(body.arcount);
    let mut out = Vec::with_capacity(n);
    let mut pos = 0usize;
    for _ in 0..n {
        let rr = next_record(b, pos)?;
        out.push(u16::try_from(rr.ttl_at).ok()?);
        pos = rr.end;
    }
    (pos == b.len()).then_some(out)
}

/// Where one record's fields are, as [`next_record`] finds them.
struct RecordAt {
    /// Offset of the 4-byte TTL.
    ttl_at: usize,
    /// The record's type.
    rtype: u16,
    /// Offset just after the RDATA.
    end: usize,
}

/// The record starting at `pos` in `m` (its owner may end in a compression pointer, which is not
/// followed), or `None` if it does not fit in `m` or its owner is not a name.
fn next_record(m: &[u8], mut pos: usize) -> Option<RecordAt> {
    loop {
        let l = *m.get(pos)?;
        match l {
            0 => {
                pos += 1;
                break;
            }
            1..=63 => pos += 1 + usize::from(l),
            0xC0..=0xFF => {
                m.get(pos + 1)?;
                pos += 2;
                break;
            }
            _ => return None,
        }
    }
    // type, class, TTL, RDLENGTH, RDATA
    let fixed = m.get(pos..pos + 10)?;
    let rtype = u16::from_be_bytes([fixed[0], fixed[1]]);
    let end = pos + 10 + usize::from(u16::from_be_bytes([fixed[8], fixed[9]]));
    (end <= m.len()).then_some(RecordAt { ttl_at: pos + 4, rtype, end })
}

/// `body` with every record's TTL reduced by `secs` (not below 0). `None` as [`ttl_offsets`].
pub fn aged_body(body: &Body, secs: u32) -> Option<Body> {
    let mut aged = body.clone();
    for off in ttl_offsets(body)? {
        let at = usize::from(off);
        let ttl = u32::from_be_bytes(aged.bytes[at..at + 4].try_into().ok()?);
        aged.bytes[at..at + 4].copy_from_slice(&ttl.saturating_sub(secs).to_be_bytes());
    }
    Some(aged)
}

/// The reply to `query` from `answer` at `now_ns`: the bytes the XDP cache sends for a hit
/// (header with the client's ID, QR, RD and CD copied, RA=1, AA=0, the RCODE; the question as
/// the client sent it; the body with TTLs aged by [`elapsed_secs`]; OPT as
/// [`crate::assemble`] writes it; truncated to `limits` by the same rule). Userspace answers
/// from its own cache with this too, so both paths send the same bytes.
///
/// Freshness is the caller's business (see [`CachedAnswer::is_fresh`]); a body whose records
/// cannot be walked is [`crate::AssembleError::BadFixup`].
pub fn replay(
    answer: &CachedAnswer,
    query: &crate::Query,
    now_ns: u64,
    limits: &crate::Limits,
) -> Result<Vec<u8>, crate::AssembleError> {
    let body = aged_body(&answer.body, elapsed_secs(answer.stored_at_ns, now_ns))
        .ok_or(crate::AssembleError::BadFixup)?;
    let body = Body { flags: body.flags & 0x000F, ..body };
    let mut out = Vec::new();
    crate::assemble(query, &body, limits, &mut out)?;
    out[3] |= 0x80; // RA
    Ok(out)
}

/// [`replay`] into a buffer the caller keeps (no allocation when `out` has room): the same
/// bytes, with the TTLs aged in place in the assembled message. Returns what [`crate::assemble`]
/// reports. On error `out` is empty.
pub fn replay_into(
    answer: &CachedAnswer,
    query: &crate::Query,
    now_ns: u64,
    limits: &crate::Limits,
    out: &mut Vec<u8>,
) -> Result<crate::Assembled, crate::AssembleError> {
    if answer.body.flags & !0x000F != 0 {
        // Not a resolver body (AA or other bits set): take the general path.
        *out = replay(answer, query, now_ns, limits)?;
        let rcode = u16::from(out[3] & 0x0F);
        let truncated = out[2] & 0x02 != 0;
        return Ok(crate::Assembled {
            rcode,
            truncated,
            additional_dropped: false,
        });
    }
    let a = crate::assemble(query, &answer.body, limits, out)?;
    out[3] |= 0x80; // RA
    let secs = elapsed_secs(answer.stored_at_ns, now_ns);
    if secs > 0 && age_in_place(out, secs).is_none() {
        out.clear();
        return Err(crate::AssembleError::BadFixup);
    }
    Ok(a)
}

/// Reduces the TTL of every record of the message `m` (not OPT) by `secs`, not below 0.
fn age_in_place(m: &mut [u8], secs: u32) -> Option<()> {
    let count = |i: usize| usize::from(u16::from_be_bytes([m[i], m[i + 1]]));
    if m.len() < crate::HEADER_LEN || count(4) > 1 {
        return None;
    }
    let n = count(6) + count(8) + count(10);
    let mut pos = crate::HEADER_LEN;
    // The question: an uncompressed name, type, class.
    if count(4) == 1 {
        pos += crate::name::name_len(m.get(pos..)?).ok()? + 4;
    }
    for _ in 0..n {
        let rr = next_record(m, pos)?;
        if rr.rtype != crate::query::TYPE_OPT {
            let at = rr.ttl_at;
            let ttl = u32::from_be_bytes(m[at..at + 4].try_into().ok()?);
            m[at..at + 4].copy_from_slice(&ttl.saturating_sub(secs).to_be_bytes());
        }
        pos = rr.end;
    }
    (pos == m.len()).then_some(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::body::{BodyWriter, Section};
    use crate::{Edns, Limits, Query, Question};

    const NAME: &[u8] = b"\x03www\x07example\x03com\x00";

    fn body() -> Body {
        let mut w = BodyWriter::new(NAME).unwrap();
        w.write_rr(NAME, true, 5, 300, b"\x03web\x07example\x03com\x00").unwrap();
        w.write_rr(b"\x03web\x07example\x03com\x00", false, 1, 60, &[198, 18, 0, 7]).unwrap();
        w.set_section(Section::Authority).unwrap();
        w.write_rr(b"\x07example\x03com\x00", false, 2, 86400, b"\x02ns\x07example\x03com\x00").unwrap();
        w.finish()
    }

    /// replay_into gives replay's bytes, for every age, with and without EDNS and truncation.
    #[test]
    fn replay_into_equals_replay() {
        let edns = Some(Edns {
            payload: 1232,
            dnssec_ok: false,
            version: 0,
            ext_rcode: 0,
        });
        let mut out = Vec::with_capacity(512);
        for e in [None, edns] {
            let q = Query {
                id: 9,
                opcode: 0,
                rd: true,
                cd: false,
                qdcount: 1,
                question: Question::new(b"\x03WwW\x07example\x03COM\x00", 1, 1),
                edns: e,
                status: crate::Status::Ok,
            };
            let a = CachedAnswer {
                qname: NAME.to_vec(),
                qtype: 1,
                dnssec_ok: false,
                body: body(),
                stored_at_ns: 5 * NS_PER_S,
                expires_at_ns: 65 * NS_PER_S,
                prefetch_at_ns: u64::MAX,
            };
            for limits in [
                Limits::tcp(1232),
                Limits {
                    max_len: 60,
                    our_payload: 1232,
                },
            ] {
                for now in [
                    0,
                    5 * NS_PER_S,
                    6 * NS_PER_S - 1,
                    7 * NS_PER_S,
                    100 * NS_PER_S,
                    u64::MAX,
                ] {
                    let want = replay(&a, &q, now, &limits).unwrap();
                    replay_into(&a, &q, now, &limits, &mut out).unwrap();
                    assert_eq!(out, want, "now {now} limit {}", limits.max_len);
                }
            }
        }
    }

    /// TTL offsets: one per record, where the 4-byte TTL sits, whatever the owner's encoding.
    #[test]
    fn ttl_offsets_walk_every_record() {
        let b = body();
        let offs = ttl_offsets(&b).unwrap();
        assert_eq!(offs.len(), 3);
        let ttls: Vec<u32> = offs.iter().map(|&o| u32::from_be_bytes(b.bytes[o as usize..o as usize + 4].try_into().unwrap())).collect();
        assert_eq!(ttls, [300, 60, 86400]);
        let mut bad = b.clone();
        bad.ancount += 1;
        assert_eq!(ttl_offsets(&bad), None, "a record missing");
        bad = b.clone();
        bad.bytes.push(0);
        assert_eq!(ttl_offsets(&bad), None, "trailing byte");
        assert_eq!(ttl_offsets(&Body::default()), Some(vec![]));
    }

    /// Replay ages TTLs by whole seconds (never below 0), sets RA, keeps the client's case.
    #[test]
    fn replay_ages_and_sets_ra() {
        let a = CachedAnswer {
            qname: NAME.to_vec(),
            qtype: 1,
            dnssec_ok: false,
            body: body(),
            stored_at_ns: 1_000_000_000,
            expires_at_ns: 61_000_000_000,
            prefetch_at_ns: u64::MAX,
        };
        let q = Query {
            id: 7,
            opcode: 0,
            rd: true,
            cd: false,
            qdcount: 1,
            question: Question::new(b"\x03WwW\x07example\x03COM\x00", 1, 1),
            edns: Some(Edns { payload: 1232, dnssec_ok: false, version: 0, ext_rcode: 0 }),
            status: crate::Status::Ok,
        };
        let out = replay(&a, &q, 62_500_000_000, &Limits::udp(q.edns.as_ref(), 1232)).unwrap();
        assert_eq!(&out[2..4], &[0x81, 0x80], "QR RD RA, AA clear, NOERROR");
        assert_eq!(&out[12..29], b"\x03WwW\x07example\x03COM\x00");
        let aged = aged_body(&a.body, 61).unwrap();
        let offs = ttl_offsets(&aged).unwrap();
        let ttl = |o: u16| u32::from_be_bytes(aged.bytes[o as usize..o as usize + 4].try_into().unwrap());
        assert_eq!((ttl(offs[0]), ttl(offs[1]), ttl(offs[2])), (239, 0, 86339));
        assert!(out.windows(aged.bytes.len()).any(|w| w == &aged.bytes[..]));
        assert_eq!(elapsed_secs(5, 1), 0);
        assert!(!a.is_fresh(61_000_000_000) && a.is_fresh(60_999_999_999));
    }
}
