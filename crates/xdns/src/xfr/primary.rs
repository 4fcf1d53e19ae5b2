//! xdns as a primary: AXFR and IXFR out (RFC 5936, RFC 1995) to `allow_transfer` clients,
//! TSIG-signed where the zone has a `key`, IXFR from the journal of differences between
//! loaded versions, and NOTIFY (RFC 1996) to `notify` targets on every new serial.
//!
//! [`outgoing`] is the query-plan step: it decides (REFUSED outside `allow_transfer`,
//! NOTAUTH with a TSIG error for a missing or bad signature, RFC 8945 §5.2) and returns an
//! [`Outgoing`] answer that the TCP transport drains message by message ([`Outgoing::next`]),
//! so a large zone is never built in memory as messages. Over UDP an IXFR gets the SOA only
//! (RFC 1995 §2: the client then asks over TCP) and an AXFR NOTIMP (`xdns_zone::respond`,
//! as before; Knot DNS answers it the same way).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use domain::base::iana::{Class, Opcode, Rcode};
use domain::base::name::ParsedName;
use domain::base::rdata::UnknownRecordData;
use domain::base::{Message, MessageBuilder, Name, Rtype, Ttl};
use domain::rdata::tsig::Time48;
use domain::rdata::ZoneRecordData;
use domain::tsig::{Key, ServerSequence};
use xdns_zone::load::{key_to_text, name_key};
use xdns_zone::{NameKey, Outcome, Transport, Zone};

use super::client::{Diff, SOA};
use super::journal;
use super::keys::KeyConfig;
use super::serial;
use crate::recursion::Prefix;
use crate::reload::{LoadedZone, Served};

/// AXFR and IXFR QTYPEs.
const AXFR: u16 = 252;
const IXFR: u16 = 251;
/// Soft size of one message of a transfer (Knot DNS and NSD use about this much).
const MESSAGE_SIZE: usize = 16 * 1024;
/// Differences kept per zone, and records in them: the oldest go first.
pub const JOURNAL_DIFFS: usize = 32;
pub const JOURNAL_RECORDS: usize = 1_000_000;
/// NOTIFY: attempts per target, and the wait for an answer to each.
const NOTIFY_TRIES: u32 = 5;
const NOTIFY_WAIT: Duration = Duration::from_secs(2);

/// The primary side of one zone: `notify`, `allow_transfer`, `key`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutgoingConfig {
    pub name: String,
    pub notify: Vec<SocketAddr>,
    pub allow_transfer: Vec<Prefix>,
    pub key: Option<KeyConfig>,
}

impl OutgoingConfig {
    /// The zone offers transfers or sends NOTIFY: it keeps a journal.
    pub fn active(&self) -> bool {
        !self.notify.is_empty() || !self.allow_transfer.is_empty()
    }
}

/// The journal of `new`, the version of a zone that follows `old` (`None`: first load):
/// `old`'s differences plus the one between them when the serial went up; empty when it
/// went back or nobody transfers the zone. Bounded by [`JOURNAL_DIFFS`] and
/// [`JOURNAL_RECORDS`]: older differences are dropped first (a client that far behind gets
/// the whole zone).
pub fn next_journal(old: Option<&LoadedZone>, new: &Arc<Zone>, keep: bool) -> Arc<Vec<Diff>> {
    next_journal_with(old, new, keep, None)
}

/// [`next_journal`], given the differences from `old` to `new` when they are known (an IXFR
/// applied in place): they are kept as they are instead of comparing the two versions whole.
pub fn next_journal_with(old: Option<&LoadedZone>, new: &Arc<Zone>, keep: bool, known: Option<&[Diff]>) -> Arc<Vec<Diff>> {
    let Some(old) = old.filter(|_| keep) else {
        return Arc::default();
    };
    if Arc::ptr_eq(&old.zone, new) || old.zone.serial == new.serial {
        return old.journal.clone();
    }
    if !serial::gt(new.serial, old.zone.serial) {
        return Arc::default();
    }
    let mut j: Vec<Diff> = old.journal.iter().cloned().collect();
    let chained = known.filter(|k| k.first().is_some_and(|d| d.from == old.zone.serial) && k.last().is_some_and(|d| d.to == new.serial));
    match chained {
        Some(k) => j.extend(k.iter().cloned()),
        None => j.push(journal::diff(&journal::records_of(&old.zone), &journal::records_of(new), old.zone.serial, new.serial)),
    }
    let size = |j: &[Diff]| j.iter().map(|d| d.deleted.len() + d.added.len()).sum::<usize>();
    while j.len() > JOURNAL_DIFFS || (j.len() > 1 && size(&j) > JOURNAL_RECORDS) {
        j.remove(0);
    }
    if size(&j) > JOURNAL_RECORDS {
        j.clear();
    }
    Arc::new(j)
}

/// The differences from `from` to the zone's serial, if the journal has the whole chain.
fn chain(journal: &[Diff], from: u32, to: u32) -> Option<&[Diff]> {
    let start = journal.iter().position(|d| d.from == from)?;
    let part = &journal[start..];
    let mut at = from;
    for d in part {
        if d.from != at {
            return None;
        }
        at = d.to;
    }
    (at == to).then_some(part)
}

/// What the records of an answer are.
enum Plan {
    /// The SOA, every other record, the SOA (AXFR, or IXFR without the differences).
    Axfr { nodes: Vec<NameKey>, node: usize, rrset: usize, rdata: usize, soa_sent: bool, end_sent: bool },
    /// The SOA, the differences (deleted with the old SOA first, added with the new SOA
    /// first), the SOA; or the SOA alone when the client is up to date.
    List { records: std::vec::IntoIter<(NameKey, u16, u32, Bytes)> },
}

/// A transfer answer, drained message by message by the TCP transport.
pub struct Outgoing {
    zone: Arc<Zone>,
    query: Message<Vec<u8>>,
    signer: Option<ServerSequence<Arc<Key>>>,
    plan: Plan,
    /// A record that did not fit the last message.
    pending: Option<(NameKey, u16, u32, Bytes)>,
    done: bool,
    /// For statistics: what the first message is.
    pub outcome: Outcome,
}

impl std::fmt::Debug for Outgoing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outgoing").field("zone", &self.zone.serial).field("outcome", &self.outcome).finish()
    }
}

impl Outgoing {
    fn soa(&self) -> Option<(NameKey, u16, u32, Bytes)> {
        let rr = self.zone.nodes.get(&self.zone.apex)?.rrset(SOA)?;
        Some((self.zone.apex.clone(), SOA, rr.ttl, Bytes::copy_from_slice(rr.rdata.first()?)))
    }

    fn next_record(&mut self) -> Option<(NameKey, u16, u32, Bytes)> {
        if let Some(p) = self.pending.take() {
            return Some(p);
        }
        let soa = self.soa();
        match &mut self.plan {
            Plan::List { records } => records.next(),
            Plan::Axfr { nodes, node, rrset, rdata, soa_sent, end_sent } => {
                if !*soa_sent {
                    *soa_sent = true;
                    return soa;
                }
                while let Some(owner) = nodes.get(*node) {
                    if let Some(n) = self.zone.nodes.get(owner) {
                        while let Some(rr) = n.rrsets.get(*rrset) {
                            let skip = rr.rtype == SOA && *owner == self.zone.apex;
                            if let (false, Some(rd)) = (skip, rr.rdata.get(*rdata)) {
                                *rdata += 1;
                                return Some((owner.clone(), rr.rtype, n.record_ttl(rr, rd), Bytes::copy_from_slice(rd)));
                            }
                            *rrset += 1;
                            *rdata = 0;
                        }
                    }
                    *node += 1;
                    *rrset = 0;
                    *rdata = 0;
                }
                if !*end_sent {
                    *end_sent = true;
                    return soa;
                }
                None
            }
        }
    }

    /// The next message of the answer, signed when the request was; `None` when all are sent.
    pub fn next(&mut self) -> Option<Vec<u8>> {
        if self.done {
            return None;
        }
        let mut b = MessageBuilder::new_vec().start_answer(&self.query, Rcode::NOERROR).ok()?;
        b.header_mut().set_aa(true);
        let mut count = 0usize;
        while let Some(r) = self.next_record() {
            let (owner, rtype, ttl, rd) = &r;
            let size = owner.len() + 10 + rd.len();
            if count > 0 && b.as_slice().len() + size > MESSAGE_SIZE {
                self.pending = Some(r);
                break;
            }
            let Ok(name) = Name::<&[u8]>::from_octets(&owner[..]) else { continue };
            let Ok(data) = UnknownRecordData::from_octets(Rtype::from_int(*rtype), &rd[..]) else { continue };
            if b.push((name, Class::IN, Ttl::from_secs(*ttl), data)).is_err() {
                self.done = true;
                return None;
            }
            count += 1;
        }
        if self.pending.is_none() {
            self.done = true;
        }
        let mut b = b.additional();
        if let Some(s) = self.signer.as_mut() {
            s.answer(&mut b, Time48::now()).ok()?;
        }
        let m = b.finish();
        if m.len() > usize::from(u16::MAX) {
            // one record too large for a TCP message: end here (the client sees an
            // incomplete transfer and keeps what it has), never a wrong length prefix
            tracing::error!(zone = %key_to_text(&self.zone.apex), "a record does not fit a message: transfer ended");
            self.done = true;
            return None;
        }
        Some(m)
    }
}

/// What the step decided.
pub enum Decision {
    /// Answered in one message (an error, or an IXFR over UDP): the outcome; bytes in `out`.
    Reply(Outcome),
    /// Stream these messages (TCP).
    Stream(Box<Outgoing>),
}

/// QTYPE of the first question (an uncompressed QNAME, as every question has).
fn first_qtype(wire: &[u8]) -> Option<u16> {
    let mut pos = 12usize;
    loop {
        let l = *wire.get(pos)? as usize;
        if l > 63 {
            return None;
        }
        pos += 1 + l;
        if l == 0 {
            break;
        }
    }
    Some(u16::from_be_bytes([*wire.get(pos)?, *wire.get(pos + 1)?]))
}

/// AXFR or IXFR for a zone we serve: the decision; `None` for any other message (or a zone
/// without `allow_transfer`, left to `xdns_zone::respond`: REFUSED, or NOTIMP for AXFR over
/// UDP).
pub fn outgoing(served: &Served, wire: &[u8], peer: Option<IpAddr>, transport: Transport, out: &mut Vec<u8>) -> Option<Decision> {
    // a query (QR=0, opcode 0) with one question of type AXFR or IXFR
    if wire.len() < 12 || wire[2] & 0x80 != 0 || (wire[2] >> 3) & 0x0f != 0 || wire[4..6] != [0, 1] {
        return None;
    }
    // every query passes here: look at QTYPE without parsing or copying anything
    let qtype = first_qtype(wire)?;
    if qtype != AXFR && qtype != IXFR {
        return None;
    }
    let mut msg = Message::from_octets(wire.to_vec()).ok()?;
    let q = msg.first_question()?;
    if qtype == AXFR && transport == Transport::Udp {
        return None;
    }
    let apex = name_key(&q.qname());
    let cfg = served.outgoing.get(&apex)?;
    if cfg.allow_transfer.is_empty() {
        return None;
    }
    let loaded = served.loaded.iter().find(|l| l.zone.apex == apex && !served.expired.contains(&apex))?;
    let reply = |out: &mut Vec<u8>, msg: &Message<Vec<u8>>, rcode: Rcode| {
        out.clear();
        if let Ok(b) = MessageBuilder::new_vec().start_answer(msg, rcode) {
            out.extend_from_slice(&b.finish());
        }
        Decision::Reply(Outcome::Answered { rcode: rcode.to_int().into(), qtype, truncated: false })
    };
    if !peer.is_some_and(|p| cfg.allow_transfer.iter().any(|a| a.contains(p))) {
        tracing::info!(zone = %cfg.name, ?peer, "transfer refused: not in allow_transfer");
        return Some(reply(out, &msg, Rcode::REFUSED));
    }
    let signer = match &cfg.key {
        None => None,
        Some(k) => {
            let Ok(key) = k.key() else {
                return Some(reply(out, &msg, Rcode::SERVFAIL));
            };
            match ServerSequence::request(&key, &mut msg, Time48::now()) {
                Ok(Some(s)) => Some(s),
                Ok(None) => {
                    tracing::warn!(zone = %cfg.name, ?peer, "unsigned transfer request for a zone with a key: NOTAUTH");
                    return Some(reply(out, &msg, Rcode::NOTAUTH));
                }
                Err(e) => {
                    tracing::warn!(zone = %cfg.name, ?peer, error = %e, "transfer request with a bad TSIG signature: NOTAUTH");
                    out.clear();
                    if let Ok(b) = e.build_message(&msg, MessageBuilder::new_vec()) {
                        out.extend_from_slice(&b.finish());
                    }
                    return Some(Decision::Reply(Outcome::Answered { rcode: Rcode::NOTAUTH.to_int().into(), qtype, truncated: false }));
                }
            }
        }
    };
    let zone = loaded.zone.clone();
    let ours = zone.serial;
    // IXFR: the client's serial from the SOA in the authority section
    let theirs = if qtype == IXFR {
        let soa = msg
            .authority()
            .ok()
            .and_then(|s| s.limit_to::<ZoneRecordData<&[u8], ParsedName<&[u8]>>>().filter_map(Result::ok).next())
            .and_then(|r| match r.data() {
                ZoneRecordData::Soa(s) => Some(s.serial().into_int()),
                _ => None,
            });
        match soa {
            Some(s) => Some(s),
            None => return Some(reply(out, &msg, Rcode::FORMERR)),
        }
    } else {
        None
    };
    let mut o = Outgoing {
        zone: zone.clone(),
        query: msg,
        signer,
        plan: Plan::List { records: Vec::new().into_iter() },
        pending: None,
        done: false,
        outcome: Outcome::Answered { rcode: 0, qtype, truncated: false },
    };
    let soa = o.soa()?;
    let up_to_date = theirs.is_some_and(|t| !serial::gt(ours, t));
    let diffs = theirs.and_then(|t| chain(&loaded.journal, t, ours));
    o.plan = if up_to_date || (transport == Transport::Udp) {
        // RFC 1995 §2: over UDP the SOA alone tells the client to ask over TCP
        Plan::List { records: vec![soa].into_iter() }
    } else if let Some(diffs) = diffs {
        let mut v = vec![soa.clone()];
        for d in diffs {
            v.extend(d.deleted.iter().chain(d.added.iter()).map(|r| (r.owner.clone(), r.rtype, r.ttl, r.rdata.clone())));
        }
        v.push(soa);
        Plan::List { records: v.into_iter() }
    } else {
        let nodes: Vec<NameKey> = zone.nodes.iter().filter(|(_, n)| !n.rrsets.is_empty()).map(|(k, _)| k.clone()).collect();
        Plan::Axfr { nodes, node: 0, rrset: 0, rdata: 0, soa_sent: false, end_sent: false }
    };
    tracing::info!(
        zone = %cfg.name, ?peer, serial = ours, from = ?theirs,
        kind = if qtype == AXFR { "axfr" } else if up_to_date { "ixfr up to date" } else if diffs.is_some() { "ixfr" } else { "ixfr as axfr" },
        "transfer out"
    );
    if transport == Transport::Udp {
        let m = o.next()?;
        out.clear();
        out.extend_from_slice(&m);
        return Some(Decision::Reply(o.outcome));
    }
    Some(Decision::Stream(Box::new(o)))
}

/// NOTIFY every `notify` target of the zones whose serial changed between `old` and `new`
/// (every zone with targets when `old` is `None`: a start), each in a task of its own that
/// tries up to [`NOTIFY_TRIES`] times until the target answers.
pub fn notify_changed(old: Option<&Served>, new: &Served) {
    for l in &new.loaded {
        let Some(cfg) = new.outgoing.get(&l.zone.apex) else { continue };
        if cfg.notify.is_empty() || new.expired.contains(&l.zone.apex) {
            continue;
        }
        let before = old.and_then(|o| o.loaded.iter().find(|p| p.zone.apex == l.zone.apex)).map(|p| p.zone.serial);
        if before == Some(l.zone.serial) {
            continue;
        }
        for &target in &cfg.notify {
            let cfg = cfg.clone();
            let serial = l.zone.serial;
            tokio::spawn(async move {
                match send_notify(&cfg, target).await {
                    Ok(tries) => tracing::info!(zone = %cfg.name, %target, serial, tries, "NOTIFY answered"),
                    Err(e) => tracing::warn!(zone = %cfg.name, %target, serial, error = %e, "NOTIFY not answered; giving up"),
                }
            });
        }
    }
}

/// The addresses NOTIFY and transfers leave from: the first specific `listen` address of
/// each family (secondaries and primaries list our address in their ACLs, and it is the one
/// we answer from), else whatever the kernel picks. Set once at start.
static SOURCES: std::sync::OnceLock<Vec<IpAddr>> = std::sync::OnceLock::new();

/// Remember the `listen` addresses as sources (see [`source_for`]).
pub fn set_sources(listen: &[SocketAddr]) {
    let _ = SOURCES.set(listen.iter().map(|a| a.ip()).filter(|ip| !ip.is_unspecified()).collect());
}

/// The local address to send to `target` from (port 0).
pub fn source_for(target: SocketAddr) -> SocketAddr {
    let ip = SOURCES
        .get()
        .and_then(|v| v.iter().find(|ip| ip.is_ipv4() == target.is_ipv4()).copied())
        .unwrap_or(if target.is_ipv4() { IpAddr::from([0u8; 4]) } else { IpAddr::from([0u16; 8]) });
    SocketAddr::new(ip, 0)
}

/// One NOTIFY to `target`, retried: the number of tries it took.
async fn send_notify(cfg: &OutgoingConfig, target: SocketAddr) -> Result<u32, String> {
    let name: Name<Vec<u8>> = cfg.name.parse().map_err(|e| format!("{e}"))?;
    let bind = source_for(target);
    let sock = tokio::net::UdpSocket::bind(bind).await.map_err(|e| e.to_string())?;
    sock.connect(target).await.map_err(|e| e.to_string())?;
    let key = cfg.key.as_ref().map(|k| k.key()).transpose()?;
    let mut last = String::new();
    for attempt in 1..=NOTIFY_TRIES {
        let id = super::client::rand_id();
        let mut b = MessageBuilder::new_vec();
        b.header_mut().set_id(id);
        b.header_mut().set_opcode(Opcode::NOTIFY);
        b.header_mut().set_aa(true);
        let mut q = b.question();
        q.push((&name, Rtype::SOA)).map_err(|e| e.to_string())?;
        let mut add = q.additional();
        let tx = match &key {
            Some(k) => Some(domain::tsig::ClientTransaction::request(k.clone(), &mut add, Time48::now()).map_err(|e| e.to_string())?),
            None => None,
        };
        let wire = add.finish();
        if let Err(e) = sock.send(&wire).await {
            last = e.to_string();
        } else {
            let mut buf = vec![0u8; 4096];
            let deadline = tokio::time::Instant::now() + NOTIFY_WAIT;
            loop {
                match tokio::time::timeout_at(deadline, sock.recv(&mut buf)).await {
                    Ok(Ok(n)) => {
                        let Ok(mut m) = Message::from_octets(buf[..n].to_vec()) else { continue };
                        if m.header().id() != id || !m.header().qr() {
                            continue;
                        }
                        if let Some(tx) = &tx {
                            if let Err(e) = tx.answer(&mut m, Time48::now()) {
                                last = format!("TSIG: {e}");
                                break;
                            }
                        }
                        if m.header().rcode() == Rcode::NOERROR {
                            return Ok(attempt);
                        }
                        last = format!("answered {}", m.header().rcode());
                        break;
                    }
                    Ok(Err(e)) => {
                        last = e.to_string();
                        break;
                    }
                    Err(_) => {
                        last = "no answer".into();
                        break;
                    }
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(500 * u64::from(attempt))).await;
    }
    Err(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(from: u32, to: u32) -> Diff {
        Diff { from, to, ..Default::default() }
    }

    #[test]
    fn qtype_without_parsing() {
        let q = |name: &[u8], t: u16| {
            let mut m = vec![0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0];
            m.extend_from_slice(name);
            m.extend_from_slice(&t.to_be_bytes());
            m.extend_from_slice(&[0, 1]);
            m
        };
        assert_eq!(first_qtype(&q(b"\x01t\x00", 252)), Some(252));
        assert_eq!(first_qtype(&q(b"\x00", 251)), Some(251));
        assert_eq!(first_qtype(&q(b"\xc0\x0c", 252)), None);
        assert_eq!(first_qtype(&q(b"\x05ab", 1)), None);
        assert_eq!(first_qtype(&[0; 12]), None);
        let full = q(b"\x01t\x00", 252);
        for cut in 0..full.len() - 2 {
            assert_eq!(first_qtype(&full[..cut]), None);
        }
    }

    #[test]
    fn chains_from_the_journal() {
        let j = vec![d(1, 2), d(2, 5), d(5, 6)];
        assert_eq!(chain(&j, 1, 6).map(|c| c.len()), Some(3));
        assert_eq!(chain(&j, 2, 6).map(|c| c.len()), Some(2));
        assert_eq!(chain(&j, 5, 6).map(|c| c.len()), Some(1));
        assert!(chain(&j, 3, 6).is_none(), "no difference starts at 3");
        assert!(chain(&j, 1, 7).is_none(), "does not reach 7");
        assert!(chain(&[d(1, 2), d(3, 4)], 1, 4).is_none(), "a gap");
    }

    /// An IXFR applied in place hands its differences to the journal: kept as they are when
    /// they lead from the old serial to the new one, else the versions are compared whole.
    #[test]
    fn known_differences_join_the_journal_as_they_are() {
        let zone = |serial: u32| {
            let mut nodes = hashbrown::HashMap::new();
            nodes.insert(Box::from(&b"\x01t\x00"[..]), xdns_zone::Node::default());
            Arc::new(Zone::new(Box::from(&b"\x01t\x00"[..]), nodes, "t.zone".into(), serial))
        };
        let old = LoadedZone {
            source: xdns_zone::ZoneSource { name: "t.".into(), file: "t.zone".into() },
            zone: zone(3),
            journal: Arc::new(vec![d(1, 3)]),
        };
        let marked = Diff { from: 3, to: 5, deleted: vec![], added: vec![super::super::client::Rec { owner: Box::from(&b"\x01x\x01t\x00"[..]), rtype: 1, ttl: 9, rdata: bytes::Bytes::from_static(&[1, 2, 3, 4]) }] };
        let j = next_journal_with(Some(&old), &zone(5), true, Some(std::slice::from_ref(&marked)));
        assert_eq!(&j[..], &[d(1, 3), marked.clone()][..]);
        // differences that do not lead to the new serial: computed (nothing differs here)
        let j = next_journal_with(Some(&old), &zone(6), true, Some(&[marked]));
        assert_eq!(j.len(), 2);
        assert_eq!((j[1].from, j[1].to, j[1].added.len()), (3, 6, 0));
    }
}
