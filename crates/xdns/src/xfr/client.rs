//! Zone transfer client: IXFR (RFC 1995) and AXFR (RFC 5936) over TCP, TSIG-signed when a
//! key is set (every message of the answer is checked in turn, RFC 8945 §5.3.1).
//!
//! [`Stream`] turns the records of an answer into what it means (up to date, a whole zone,
//! or a chain of differences) without I/O, so it is tested on its own; [`fetch`] does the
//! I/O. Nothing here trusts the primary: lengths, counts, serials and owners are checked, and
//! anything odd is an error for the caller, which keeps serving what it has.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use domain::base::iana::{Class, Opcode, Rcode};
use domain::base::name::ParsedName;
use domain::base::rdata::{ComposeRecordData, UnknownRecordData};
use domain::base::{Message, MessageBuilder, Name, Rtype, ToName, Ttl};
use domain::rdata::tsig::Time48;
use domain::rdata::ZoneRecordData;
use domain::tsig::{ClientSequence, Key};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use xdns_zone::load::{name_key, push_name_key};
use xdns_zone::records::RecordBuilder;
use xdns_zone::NameKey;

use super::serial;

/// The SOA type.
pub const SOA: u16 = 6;
/// Most records one transfer may carry (a bound on memory for a primary gone wrong).
pub const MAX_RECORDS: usize = 20_000_000;
/// Connect, and each read, must complete within this.
pub const IO_TIMEOUT: Duration = Duration::from_secs(10);
/// Messages received ahead of their parsing, at most (a 1M-record zone is about 1,500
/// messages from Knot DNS; 4,096 of at most 64 KiB bound the memory to 256 MiB).
const READ_AHEAD: usize = 4096;
/// A whole transfer must complete within this.
pub const TRANSFER_TIMEOUT: Duration = Duration::from_secs(600);

/// One record of a transfer: owner as a lowercased wire name, RDATA uncompressed (as the zone
/// loader stores it, so records compare byte for byte with a loaded zone's).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Rec {
    pub owner: NameKey,
    pub rtype: u16,
    pub ttl: u32,
    pub rdata: Bytes,
}

/// One difference of an IXFR: the records deleted (the old SOA first) and added (the new SOA
/// first) to go from serial `from` to `to`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Diff {
    pub from: u32,
    pub to: u32,
    pub deleted: Vec<Rec>,
    pub added: Vec<Rec>,
}

/// What a transfer brought.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fetched {
    /// The primary's serial is not newer than ours.
    UpToDate { serial: u32 },
    /// The whole zone (AXFR, or an IXFR answered with the whole zone), built as it arrived
    /// (not yet validated).
    Full { serial: u32, zone: Box<RecordBuilder> },
    /// Differences from our serial to `serial`, in order.
    Incremental { serial: u32, diffs: Vec<Diff> },
}

/// Why a transfer failed.
#[derive(Debug, PartialEq, Eq)]
pub enum XfrError {
    /// Could not connect, read or write, or the connection closed early.
    Io(String),
    /// The primary answered with this RCODE (REFUSED, NOTAUTH, NOTIMP, ...).
    Rcode(Rcode),
    /// A TSIG signature was missing or wrong.
    Tsig(String),
    /// The answer does not make sense.
    Malformed(String),
}

impl std::fmt::Display for XfrError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            XfrError::Io(e) => write!(f, "I/O: {e}"),
            XfrError::Rcode(r) => write!(f, "primary answered {r}"),
            XfrError::Tsig(e) => write!(f, "TSIG: {e}"),
            XfrError::Malformed(e) => write!(f, "malformed answer: {e}"),
        }
    }
}

/// Where the interpretation of an answer stands.
#[derive(Debug)]
enum State {
    /// Nothing yet: the first record must be the apex SOA.
    Start,
    /// Only the first SOA so far.
    First(Rec),
    /// A whole zone, until the SOA again: built as the records arrive.
    Axfr(Box<RecordBuilder>),
    /// Reading the deletions of a difference.
    Deleting(Diff),
    /// Reading the additions of a difference.
    Adding(Diff),
    /// Complete.
    Done(Fetched),
    /// An error was found: nothing more is read.
    Failed,
}

/// Interprets the records of an IXFR or AXFR answer (RFC 1995 §4, RFC 5936 §2.2).
#[derive(Debug)]
pub struct Stream {
    apex: NameKey,
    /// Our serial, for an IXFR.
    have: Option<u32>,
    /// The primary's serial: the first record's.
    serial: u32,
    diffs: Vec<Diff>,
    state: State,
    count: usize,
    /// Names a whole zone is expected to have (its table is made that large at once).
    nodes_hint: usize,
}

impl Stream {
    /// A stream for the zone at `apex`; `have` is our serial when we asked for an IXFR.
    pub fn new(apex: NameKey, have: Option<u32>) -> Self {
        Self { apex, have, serial: 0, diffs: Vec::new(), state: State::Start, count: 0, nodes_hint: 0 }
    }

    /// A whole zone's table is made for `nodes` names at once (e.g. the version we have).
    pub fn with_nodes_hint(mut self, nodes: usize) -> Self {
        self.nodes_hint = nodes;
        self
    }

    fn soa_serial(&self, owner: &[u8], rtype: u16, rdata: &[u8]) -> Option<u32> {
        if rtype == SOA && owner == &self.apex[..] {
            serial::soa_serial(rdata)
        } else {
            None
        }
    }

    /// A whole zone starting with `first` (the SOA).
    fn whole(&self, first: Rec) -> Box<RecordBuilder> {
        let mut b = Box::new(RecordBuilder::with_capacity(self.apex.clone(), self.nodes_hint));
        b.add(&first.owner, first.rtype, first.ttl, &first.rdata);
        b
    }

    /// Take one record. `Ok(true)` once the answer is complete.
    #[cfg(test)]
    pub fn push(&mut self, r: Rec) -> Result<bool, XfrError> {
        self.push_parts(&r.owner, r.rtype, r.ttl, &r.rdata)
    }

    /// [`Stream::push`] of a record given by parts (`owner` lowercased): the records of a
    /// whole zone go into its zone as they come, with no copy of their own.
    pub fn push_parts(&mut self, owner: &[u8], rtype: u16, ttl: u32, rdata: &[u8]) -> Result<bool, XfrError> {
        self.count += 1;
        if self.count > MAX_RECORDS {
            self.state = State::Failed;
            return Err(XfrError::Malformed(format!("more than {MAX_RECORDS} records")));
        }
        let soa = self.soa_serial(owner, rtype, rdata);
        let rec = || Rec { owner: owner.into(), rtype, ttl, rdata: Bytes::copy_from_slice(rdata) };
        let state = std::mem::replace(&mut self.state, State::Failed);
        let bad = |m: &str| Err(XfrError::Malformed(m.to_string()));
        self.state = match state {
            State::Start => match soa {
                Some(s) => {
                    self.serial = s;
                    State::First(rec())
                }
                None => return bad("the first record is not the zone's SOA"),
            },
            State::First(first) => match soa {
                Some(s) if s == self.serial => State::Done(Fetched::Full { serial: s, zone: self.whole(first) }),
                Some(s) if Some(s) == self.have => State::Deleting(Diff { from: s, deleted: vec![rec()], ..Default::default() }),
                Some(_) => return bad("an SOA of another serial right after the first"),
                None => {
                    if rtype == SOA {
                        return bad("an SOA record below the apex");
                    }
                    let mut zone = self.whole(first);
                    zone.add(owner, rtype, ttl, rdata);
                    State::Axfr(zone)
                }
            },
            State::Axfr(mut zone) => match soa {
                Some(s) if s == self.serial => State::Done(Fetched::Full { serial: s, zone }),
                Some(_) => return bad("an SOA of another serial inside the zone"),
                None => {
                    if rtype == SOA {
                        return bad("an SOA record below the apex");
                    }
                    zone.add(owner, rtype, ttl, rdata);
                    State::Axfr(zone)
                }
            },
            State::Deleting(mut d) => match soa {
                Some(s) => {
                    if !serial::gt(s, d.from) {
                        return bad("a difference whose new serial is not newer than its old");
                    }
                    d.to = s;
                    d.added.push(rec());
                    State::Adding(d)
                }
                None => {
                    d.deleted.push(rec());
                    State::Deleting(d)
                }
            },
            State::Adding(mut d) => match soa {
                Some(s) => {
                    let to = d.to;
                    self.diffs.push(d);
                    if to == self.serial && s == self.serial {
                        State::Done(Fetched::Incremental { serial: s, diffs: std::mem::take(&mut self.diffs) })
                    } else if s == to {
                        State::Deleting(Diff { from: s, deleted: vec![rec()], ..Default::default() })
                    } else {
                        return bad("a difference that does not start where the previous one ended");
                    }
                }
                None => {
                    d.added.push(rec());
                    State::Adding(d)
                }
            },
            State::Done(_) => return bad("records after the closing SOA"),
            State::Failed => return bad("records after an error"),
        };
        Ok(matches!(self.state, State::Done(_)))
    }

    /// The end of one message: an answer of only our SOA (or an older one) means up to date.
    pub fn end_of_message(&mut self) -> Option<Fetched> {
        if let State::First(_) = &self.state {
            if let Some(h) = self.have {
                if !serial::gt(self.serial, h) {
                    self.state = State::Done(Fetched::UpToDate { serial: self.serial });
                }
            }
        }
        self.finished()
    }

    /// The result, once complete.
    pub fn finished(&mut self) -> Option<Fetched> {
        match std::mem::replace(&mut self.state, State::Failed) {
            State::Done(f) => Some(f),
            other => {
                self.state = other;
                None
            }
        }
    }
}

/// What to ask for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// IXFR from our serial (the SOA RDATA we have goes in the authority section).
    Ixfr,
    Axfr,
}

/// Transfer the zone `apex` (presentation form) from `primary`: an IXFR from `have` (our
/// serial and SOA RDATA) or an AXFR, signed with `key` when set. A whole zone's table is
/// made for `nodes_hint` names at once (the version we have: zones change little).
pub async fn fetch(
    primary: SocketAddr,
    apex: &str,
    key: Option<&Arc<Key>>,
    kind: Kind,
    have: Option<(u32, Bytes)>,
    nodes_hint: usize,
) -> Result<Fetched, XfrError> {
    let name: Name<Vec<u8>> = apex.parse().map_err(|e| XfrError::Malformed(format!("zone name: {e}")))?;
    let id: u16 = rand_id();
    let mut b = MessageBuilder::new_vec();
    b.header_mut().set_id(id);
    let mut q = b.question();
    let qtype = match (kind, &have) {
        (Kind::Ixfr, Some(_)) => Rtype::IXFR,
        _ => Rtype::AXFR,
    };
    q.push((&name, qtype)).map_err(|e| XfrError::Malformed(e.to_string()))?;
    let mut auth = q.authority();
    if qtype == Rtype::IXFR {
        if let Some((_, soa)) = &have {
            let data = UnknownRecordData::from_octets(Rtype::SOA, soa.as_ref())
                .map_err(|e| XfrError::Malformed(e.to_string()))?;
            auth.push((&name, Class::IN, Ttl::from_secs(0), data)).map_err(|e| XfrError::Malformed(e.to_string()))?;
        }
    }
    let mut add = auth.additional();
    let mut seq = match key {
        Some(k) => Some(ClientSequence::request(k.clone(), &mut add, Time48::now()).map_err(|e| XfrError::Malformed(e.to_string()))?),
        None => None,
    };
    let query = add.finish();

    let deadline = Instant::now() + TRANSFER_TIMEOUT;
    let io = |e: std::io::Error| XfrError::Io(e.to_string());
    let connect = async {
        let sock = if primary.is_ipv4() { tokio::net::TcpSocket::new_v4()? } else { tokio::net::TcpSocket::new_v6()? };
        let from = super::primary::source_for(primary);
        if !from.ip().is_unspecified() {
            sock.bind(from)?;
        }
        sock.connect(primary).await
    };
    let mut tcp = tokio::time::timeout(IO_TIMEOUT, connect)
        .await
        .map_err(|_| XfrError::Io("connect timed out".into()))?
        .map_err(io)?;
    let mut framed = Vec::with_capacity(query.len() + 2);
    framed.extend_from_slice(&(query.len() as u16).to_be_bytes());
    framed.extend_from_slice(&query);
    tcp.write_all(&framed).await.map_err(io)?;

    let mut stream = Stream::new(name_key(&name), if qtype == Rtype::IXFR { have.as_ref().map(|h| h.0) } else { None })
        .with_nodes_hint(nodes_hint);
    // The socket is drained by its own task while the messages are checked and their
    // records parsed into the zone on a blocking thread: the primary never waits on our
    // parsing (Knot DNS drops a transfer whose reader stalls), and on two cores receiving
    // and building overlap. At most [`READ_AHEAD`] messages wait (a bound on memory).
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Result<Vec<u8>, XfrError>>(READ_AHEAD);
    let reader = tokio::spawn(async move {
        loop {
            let left = deadline.saturating_duration_since(Instant::now()).min(IO_TIMEOUT);
            let got = tokio::select! {
                _ = tx.closed() => return,
                r = tokio::time::timeout(left, read_message(&mut tcp)) => r,
            };
            let got = got.map_err(|_| XfrError::Io("read timed out".into())).and_then(|r| r);
            let failed = got.is_err();
            if tx.send(got).await.is_err() || failed {
                return;
            }
        }
    });
    let parse = tokio::task::spawn_blocking(move || {
        let mut first = true;
        // one owner and one RDATA buffer for the whole transfer: the stream copies what it keeps
        let (mut owner, mut rdata) = (Vec::with_capacity(256), Vec::with_capacity(1024));
        loop {
            let wire = rx.blocking_recv().ok_or_else(|| XfrError::Io("connection closed mid-transfer".into()))??;
            let mut msg = Message::from_octets(wire).map_err(|_| XfrError::Malformed("shorter than a header".into()))?;
            let h = msg.header();
            if h.id() != id || !h.qr() || h.opcode() != Opcode::QUERY {
                return Err(XfrError::Malformed("an answer with another ID, or not an answer".into()));
            }
            if let Some(seq) = seq.as_mut() {
                seq.answer(&mut msg, Time48::now()).map_err(|e| XfrError::Tsig(e.to_string()))?;
            }
            if msg.header().rcode() != Rcode::NOERROR {
                return Err(XfrError::Rcode(msg.header().rcode()));
            }
            if first {
                // RFC 5936 §2.2.1: the first message repeats the question (later ones may not).
                let ok = msg.first_question().is_some_and(|q| q.qname().name_eq(&name) && q.qtype() == qtype);
                if !ok && msg.header_counts().qdcount() > 0 {
                    return Err(XfrError::Malformed("the answer is for another question".into()));
                }
                first = false;
            }
            let answer = msg.answer().map_err(|e| XfrError::Malformed(e.to_string()))?;
            let mut done = false;
            for rr in answer {
                let rr = rr.map_err(|e| XfrError::Malformed(e.to_string()))?;
                if done {
                    return Err(XfrError::Malformed("records after the closing SOA".into()));
                }
                if rr.class() != Class::IN {
                    return Err(XfrError::Malformed(format!("class {} (only IN)", rr.class())));
                }
                owner.clear();
                push_name_key(&mut owner, &rr.owner());
                let rtype = rr.rtype().to_int();
                // RDATA without names is the same bytes parsed and composed again: checked
                // and copied as it is; the rest is parsed (names decompressed) and composed
                let raw = rr
                    .to_record::<UnknownRecordData<&[u8]>>()
                    .map_err(|e| XfrError::Malformed(e.to_string()))?
                    .ok_or_else(|| XfrError::Malformed("RDATA".into()))?;
                let rd = match name_free_rdata(rtype, raw.data().data()) {
                    Some(Ok(rd)) => rd,
                    Some(Err(why)) => return Err(XfrError::Malformed(format!("a {} record: {why}", rr.rtype()))),
                    None => {
                        let rec = rr
                            .to_record::<ZoneRecordData<&[u8], ParsedName<&[u8]>>>()
                            .map_err(|e| XfrError::Malformed(e.to_string()))?
                            .ok_or_else(|| XfrError::Malformed(format!("a {} record in a transfer", rr.rtype())))?;
                        rdata.clear();
                        rec.data().compose_rdata(&mut rdata).map_err(|_| XfrError::Malformed("RDATA".into()))?;
                        &rdata[..]
                    }
                };
                done = stream.push_parts(&owner, rtype, rr.ttl().as_secs(), rd)?;
            }
            if let Some(f) = stream.end_of_message() {
                if let Some(seq) = seq {
                    seq.done().map_err(|e| XfrError::Tsig(e.to_string()))?;
                }
                return Ok(f);
            }
        }
    });
    let r = parse.await.map_err(|e| XfrError::Malformed(format!("parsing stopped: {e}")));
    reader.abort();
    r?
}

/// The RDATA of the common types that carry no domain name (A, AAAA, TXT), checked as
/// `domain`'s parser checks it: `Some(Ok(rdata))` to keep as it is, `Some(Err(why))` if
/// malformed, `None` for every other type (parsed and composed, names decompressed).
fn name_free_rdata(rtype: u16, rd: &[u8]) -> Option<Result<&[u8], &'static str>> {
    Some(match rtype {
        1 if rd.len() == 4 => Ok(rd),
        1 => Err("RDATA not 4 octets"),
        28 if rd.len() == 16 => Ok(rd),
        28 => Err("RDATA not 16 octets"),
        16 => {
            // a sequence of character strings, each a length octet and that many octets
            let mut pos = 0usize;
            while pos < rd.len() {
                pos += 1 + rd[pos] as usize;
            }
            if pos == rd.len() {
                Ok(rd)
            } else {
                Err("a character string runs past the RDATA")
            }
        }
        _ => return None,
    })
}

/// One length-prefixed message.
async fn read_message(tcp: &mut TcpStream) -> Result<Vec<u8>, XfrError> {
    let mut len = [0u8; 2];
    tcp.read_exact(&mut len).await.map_err(|e| XfrError::Io(format!("connection closed mid-transfer: {e}")))?;
    let mut buf = vec![0u8; u16::from_be_bytes(len) as usize];
    tcp.read_exact(&mut buf).await.map_err(|e| XfrError::Io(format!("connection closed mid-transfer: {e}")))?;
    Ok(buf)
}

/// A message ID that an off-path attacker cannot guess.
pub(crate) fn rand_id() -> u16 {
    let mut b = [0u8; 2];
    if getrandom(&mut b).is_err() {
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        return (t.subsec_nanos() ^ std::process::id()) as u16;
    }
    u16::from_ne_bytes(b)
}

fn getrandom(buf: &mut [u8]) -> std::io::Result<()> {
    // SAFETY: `buf` is valid for writes of `buf.len()` bytes.
    let n = unsafe { libc::getrandom(buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n as usize == buf.len() {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const APEX: &[u8] = b"\x07example\x03com\x00";

    fn soa(serial: u32) -> Rec {
        let mut v = b"\x02ns\x00\x01h\x00".to_vec();
        for n in [serial, 60, 60, 600, 60] {
            v.extend_from_slice(&n.to_be_bytes());
        }
        Rec { owner: APEX.into(), rtype: SOA, ttl: 60, rdata: v.into() }
    }

    fn a(label: &str, last: u8) -> Rec {
        let mut owner = vec![label.len() as u8];
        owner.extend_from_slice(label.as_bytes());
        owner.extend_from_slice(APEX);
        Rec { owner: owner.into(), rtype: 1, ttl: 60, rdata: Bytes::from(vec![198, 18, 0, last]) }
    }

    /// A whole zone's records, sorted by owner and type.
    fn records(zone: &RecordBuilder) -> Vec<Rec> {
        let mut v = Vec::new();
        zone.for_each_record(|owner, rtype, ttl, rd| v.push(Rec { owner: owner.into(), rtype, ttl, rdata: Bytes::copy_from_slice(rd) }));
        v.sort_by(|x, y| (&x.owner, x.rtype).cmp(&(&y.owner, y.rtype)));
        v
    }

    fn feed(have: Option<u32>, recs: &[Rec]) -> Result<Option<Fetched>, XfrError> {
        let mut s = Stream::new(APEX.into(), have);
        for r in recs {
            s.push(r.clone())?;
        }
        Ok(s.end_of_message())
    }

    #[test]
    fn axfr_ixfr_and_up_to_date() {
        // AXFR
        let f = feed(None, &[soa(5), a("a", 1), a("b", 2), a("b", 2), soa(5)]).unwrap();
        let Some(Fetched::Full { serial: 5, zone }) = f else { panic!("{f:?}") };
        assert_eq!(records(&zone), {
            let mut v = vec![soa(5), a("a", 1), a("b", 2)];
            v.sort_by(|x, y| (&x.owner, x.rtype).cmp(&(&y.owner, y.rtype)));
            v
        });
        // an IXFR answered with the whole zone
        let f = feed(Some(3), &[soa(5), a("a", 1), soa(5)]).unwrap();
        assert!(matches!(f, Some(Fetched::Full { serial: 5, .. })), "{f:?}");
        // two differences 3 → 4 → 5
        let recs = [soa(5), soa(3), a("a", 1), soa(4), a("a", 2), soa(4), soa(5), a("c", 3), soa(5)];
        let f = feed(Some(3), &recs).unwrap().unwrap();
        let Fetched::Incremental { serial: 5, diffs } = f else { panic!("{f:?}") };
        assert_eq!(diffs.len(), 2);
        assert_eq!((diffs[0].from, diffs[0].to), (3, 4));
        assert_eq!(diffs[0].deleted, vec![soa(3), a("a", 1)]);
        assert_eq!(diffs[0].added, vec![soa(4), a("a", 2)]);
        assert_eq!((diffs[1].from, diffs[1].to), (4, 5));
        assert_eq!(diffs[1].deleted, vec![soa(4)]);
        assert_eq!(diffs[1].added, vec![soa(5), a("c", 3)]);
        // only our SOA (or an older one): up to date
        assert_eq!(feed(Some(5), &[soa(5)]).unwrap(), Some(Fetched::UpToDate { serial: 5 }));
        assert_eq!(feed(Some(6), &[soa(5)]).unwrap(), Some(Fetched::UpToDate { serial: 5 }));
        // a newer SOA alone: not finished (more messages follow)
        assert_eq!(feed(Some(4), &[soa(5)]).unwrap(), None);
        // cut: no closing SOA
        assert_eq!(feed(None, &[soa(5), a("a", 1)]).unwrap(), None);
        assert_eq!(feed(Some(3), &[soa(5), soa(3), a("a", 1), soa(5)]).unwrap(), None);
    }

    /// Name-free RDATA is kept as it came when `domain` would accept it, refused when it
    /// would not, and every other type is left to `domain`.
    #[test]
    fn name_free_rdata_is_checked_as_domain_checks_it() {
        use domain::base::rdata::ParseRecordData;
        let rows: Vec<(u16, Vec<u8>)> = vec![
            (1, vec![198, 18, 0, 1]),
            (1, vec![198, 18, 0]),
            (1, vec![198, 18, 0, 1, 2]),
            (28, vec![0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]),
            (28, vec![1, 2, 3, 4]),
            (16, b"\x03abc\x00\x01d".to_vec()),
            (16, b"\x03ab".to_vec()),
            (16, b"".to_vec()),
        ];
        for (t, rd) in rows {
            let mut p = domain::dep::octseq::Parser::from_ref(&rd[..]);
            let parsed = ZoneRecordData::<&[u8], ParsedName<&[u8]>>::parse_rdata(Rtype::from_int(t), &mut p);
            let domain_ok = matches!(parsed, Ok(Some(_))) && p.remaining() == 0;
            let ours = name_free_rdata(t, &rd).expect("a name-free type");
            assert_eq!(ours.is_ok(), domain_ok, "type {t} {rd:?}");
            if let (Ok(kept), Ok(Some(rec))) = (ours, parsed) {
                let mut composed = Vec::new();
                rec.compose_rdata(&mut composed).unwrap();
                assert_eq!(kept, &composed[..], "type {t}");
            }
        }
        assert!(name_free_rdata(2, b"\x00").is_none());
        assert!(name_free_rdata(15, b"\x00\x01\x00").is_none());
    }

    #[test]
    fn broken_answers_are_errors() {
        let rows: Vec<(&str, Option<u32>, Vec<Rec>)> = vec![
            ("not SOA first", None, vec![a("a", 1)]),
            ("another serial inside", None, vec![soa(5), a("a", 1), soa(6)]),
            ("records after the end", None, vec![soa(5), a("a", 1), soa(5), a("b", 1)]),
            ("chain gap", Some(3), vec![soa(6), soa(3), soa(4), soa(5), soa(6), soa(6)]),
            ("going back", Some(3), vec![soa(5), soa(3), soa(2)]),
        ];
        for (what, have, recs) in rows {
            assert!(feed(have, &recs).is_err(), "{what}");
        }
        // an SOA below the apex
        let mut low = soa(5);
        low.owner = a("x", 0).owner;
        assert!(feed(None, &[soa(5), a("a", 1), low.clone()]).is_err());
        assert!(feed(None, &[soa(5), low]).is_err(), "right after the first");
    }
}
