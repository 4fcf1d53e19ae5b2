//! The query plan: what the daemon does with one DNS message, whatever carried it.
//!
//! Transports (`server::udp`, `server::tcp`) only frame messages: they read one, call
//! [`handle`], and carry out the [`Action`] it returns (send the reply, hand a recursive miss
//! to the resolver, or count the failure). Everything a message meets in userspace happens
//! here, in order, as steps that either let it go on or end it with an action, the way Knot
//! DNS's query plan runs its modules:
//!
//! 1. **begin**: the message as received, before any parsing that answers: the guard's
//!    lists (a blocked source or name gets nothing) and DNS cookies (`crate::guard`);
//! 2. **recursion** ([`crate::recursion::route`]): a query under no served zone, with a
//!    `[resolver]`: REFUSED outside `allow` or with RD=0, a cache hit replayed at once, or a
//!    miss to resolve;
//! 3. **authoritative** ([`xdns_zone::respond`]): every other message, errors included
//!    (FORMERR, NOTIMP, REFUSED, BADVERS), answered from the served zones;
//! 4. **end**: the reply as it will be sent: the server cookie, and RRL on UDP answers
//!    (dropped, or slipped with TC=1); then dnstap ([`crate::dnstap`]) logs the query and
//!    the reply sent, if any (AUTH_* or, for the resolver's step, CLIENT_*).
//!
//! Between 1 and 2, **transfers**: AXFR/IXFR out ([`crate::xfr::primary`], a streamed
//! [`Action::Transfer`] over TCP), NOTIFY for secondary zones, and SERVFAIL for a secondary
//! zone past its expire time ([`crate::xfr::notify`]). A step never panics on
//! input; should one panic all the same, [`handle`] catches it and the message is dropped and
//! counted (`dropped.internal`), never answered with half-written bytes.

use std::net::IpAddr;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::SystemTime;

use xdns_wire::{CacheKey, Query};
use xdns_zone::{respond, Outcome, Transport};

use crate::guard::{Guard, LiveBlocks, Verdict};
use crate::recursion::{self, Recursion, Route};
use crate::reload::Served;
use crate::stats::{DropKind, Shard};

/// One message to handle.
#[derive(Clone, Copy, Debug)]
pub struct Message<'a> {
    /// The DNS message as received (after the TCP length prefix).
    pub wire: &'a [u8],
    /// The client's address (`None` when the transport could not tell: never recursed for).
    pub peer: Option<IpAddr>,
    pub transport: Transport,
    /// The client's and the server's addresses with ports, for dnstap: filled by the
    /// transports while it is on (`crate::dnstap::enabled`), else left empty.
    pub ends: crate::dnstap::Ends,
}

/// What the transport must do with a handled message.
#[derive(Debug)]
pub enum Action {
    /// The reply, if any, is in the output buffer: send it when the outcome says `Answered`
    /// and the buffer is not empty. Count the outcome ([`Shard::record`]).
    Reply(Outcome),
    /// A recursive miss: resolve it and answer later ([`recursion::resolve_and_answer`],
    /// or [`overloaded`] when the transport cannot queue it).
    Resolve(Box<Query>, CacheKey),
    /// A zone transfer out (TCP): send each message [`crate::xfr::primary::Outgoing::next`]
    /// gives, in order. Counted once, by its outcome.
    Transfer(Box<crate::xfr::primary::Outgoing>),
    /// A step failed (a panic, caught): nothing is sent; counted as `dropped.internal`.
    Fail,
    /// The guard dropped it (a blocked source or name, over the rate limit): nothing is sent.
    Drop(DropKind),
}

impl Action {
    /// Count this action's outcome on `shard` (a `Resolve` is counted when its answer is
    /// sent, by whoever resolves it).
    pub fn record(&self, shard: &Shard, transport: Transport) {
        match self {
            Action::Reply(outcome) => shard.record(transport, *outcome),
            Action::Resolve(..) => {}
            Action::Transfer(t) => shard.record(transport, t.outcome),
            Action::Fail => shard.record_dropped(transport, DropKind::Internal),
            Action::Drop(kind) => shard.record_dropped(transport, *kind),
        }
    }
}

/// What a step says of a message: go on to the next step, or stop with this action.
enum Flow {
    Continue,
    Done(Action),
}

/// A step of the plan.
type Step = fn(&Served, Option<&Recursion>, &Message<'_>, &mut Vec<u8>) -> Flow;

/// The steps, in order (see the module documentation).
const PLAN: [Step; 3] = [transfers, recursive, authoritative];
/// The place of [`recursive`] in [`PLAN`]: what it answers is the resolver's (dnstap logs it
/// as CLIENT_QUERY/CLIENT_RESPONSE, the rest as AUTH_QUERY/AUTH_RESPONSE).
const RECURSIVE_STEP: usize = 1;

/// Run the plan on `msg` against the state served now (`served`, the guard and the resolver
/// when configured); any reply is written into `out` (cleared first).
pub fn handle(
    served: &Served,
    guard: Option<&Guard>,
    live: &LiveBlocks,
    recursion: Option<&Recursion>,
    msg: Message<'_>,
    out: &mut Vec<u8>,
) -> Action {
    out.clear();
    // dnstap off: one relaxed load, nothing else
    let tap = crate::dnstap::enabled().then(crate::dnstap::current);
    let received = tap.is_some().then(SystemTime::now);
    let mut by_resolver = false;
    let run = catch_unwind(AssertUnwindSafe(|| {
        // step 1, begin: blocks made live (`xdns guard block`), the guard's lists and cookies
        if live.blocks(msg.peer) && !guard.is_some_and(|g| g.allows(msg.peer)) {
            return Action::Drop(DropKind::Blocked);
        }
        // the detector's suffix blocks (unknown labels under a flooded suffix)
        if !live.names.load().0.is_empty()
            && !guard.is_some_and(|g| g.allows(msg.peer))
            && crate::guard::question_name(msg.wire).is_some_and(|n| live.blocks_name(&n))
        {
            return Action::Drop(DropKind::Blocked);
        }
        let cookie = match guard.map(|g| g.begin(msg.wire, msg.peer)) {
            Some(Verdict::Drop) => return Action::Drop(DropKind::Blocked),
            Some(Verdict::FormErr) => return formerr(served, &msg, out),
            Some(Verdict::Pass(c)) => Some(c),
            None => None,
        };
        let mut action = Action::Reply(Outcome::Dropped(xdns_zone::DropReason::Malformed));
        for (i, step) in PLAN.into_iter().enumerate() {
            if let Flow::Done(a) = step(served, recursion, &msg, out) {
                action = a;
                by_resolver = i == RECURSIVE_STEP;
                break;
            }
        }
        // step 4, end: the server cookie, and RRL on UDP answers
        if let (Some(g), Some(c), Action::Reply(Outcome::Answered { rcode, qtype, .. })) = (guard, cookie, &action) {
            if !out.is_empty() {
                let (rcode, qtype) = (*rcode, *qtype);
                if !g.end(out, msg.peer, msg.transport == Transport::Udp, c, rrl_name(served, msg.wire)) {
                    out.clear();
                    return Action::Drop(DropKind::RateLimited);
                }
                let truncated = out.get(2).is_some_and(|f| f & 0x02 != 0);
                action = Action::Reply(Outcome::Answered { rcode, qtype, truncated });
            }
        }
        action
    }));
    let action = run.unwrap_or_else(|_| {
        out.clear();
        Action::Fail
    });
    // dnstap: the query as received and the reply as it will be sent
    if let (Some(tap), Some(at)) = (tap.as_ref().and_then(|t| t.as_deref()), received) {
        log_dnstap(tap, &msg, at, by_resolver, &action, out);
    }
    action
}

/// The query (and the reply in `out`, if one is sent) to dnstap.
fn log_dnstap(tap: &crate::dnstap::Dnstap, msg: &Message<'_>, at: SystemTime, by_resolver: bool, action: &Action, out: &[u8]) {
    use crate::dnstap::{Kind, Message as Tap};
    let (query, response) = match by_resolver {
        true => (Kind::ClientQuery, Kind::ClientResponse),
        false => (Kind::AuthQuery, Kind::AuthResponse),
    };
    let client = msg.ends.client.or(msg.peer.map(|ip| std::net::SocketAddr::new(ip, 0)));
    let m = Tap { kind: query, proto: msg.transport.into(), query_addr: client, response_addr: msg.ends.server, wire: msg.wire, time: at, query_time: None };
    tap.log(&m);
    if matches!(action, Action::Reply(Outcome::Answered { .. })) && !out.is_empty() {
        tap.log(&Tap { kind: response, wire: out, time: SystemTime::now(), query_time: Some(at), ..m });
    }
}

/// The name RRL accounts an answer to: the zone it falls in (so that a random-subdomain flood
/// shares one account per client prefix), else the question name.
fn rrl_name(served: &Served, wire: &[u8]) -> u64 {
    let Some(name) = crate::guard::question_name(wire) else {
        return 0;
    };
    match served.zones.find(&name) {
        Some(z) => xdns_guard::rrl::name_hash(&z.apex),
        None => xdns_guard::rrl::name_hash(&name),
    }
}

/// FORMERR for a query whose COOKIE option is malformed (RFC 7873 §5.2.2).
fn formerr(served: &Served, msg: &Message<'_>, out: &mut Vec<u8>) -> Action {
    match xdns_wire::Query::parse(msg.wire) {
        Ok(q) => {
            let rcode = xdns_wire::response::error_response(&q, xdns_wire::response::rcode::FORMERR, served.respond.edns_payload, out);
            Action::Reply(Outcome::Answered { rcode, qtype: q.question.as_ref().map_or(0, |qq| qq.qtype), truncated: false })
        }
        Err(_) => Action::Reply(respond(&served.zones, msg.wire, msg.transport, &served.respond, out)),
    }
}

/// Step 1b: transfers out ([`crate::xfr::primary`]), NOTIFY for secondary zones, and
/// SERVFAIL for a secondary zone past its expire time ([`crate::xfr::notify`]).
fn transfers(served: &Served, _: Option<&Recursion>, msg: &Message<'_>, out: &mut Vec<u8>) -> Flow {
    use crate::xfr::primary::{outgoing, Decision};
    match outgoing(served, msg.wire, msg.peer, msg.transport, out) {
        Some(Decision::Reply(o)) => return Flow::Done(Action::Reply(o)),
        Some(Decision::Stream(t)) => return Flow::Done(Action::Transfer(t)),
        None => {}
    }
    if let Some(o) = crate::xfr::notify::notify(served, msg.wire, msg.peer, out) {
        return Flow::Done(Action::Reply(o));
    }
    match crate::xfr::notify::expired(served, msg.wire, served.respond.edns_payload, out) {
        Some(o) => Flow::Done(Action::Reply(o)),
        None => Flow::Continue,
    }
}

/// Step 2: names under no served zone, with a `[resolver]`.
fn recursive(served: &Served, recursion: Option<&Recursion>, msg: &Message<'_>, out: &mut Vec<u8>) -> Flow {
    let (Some(rec), Some(peer)) = (recursion, msg.peer) else {
        return Flow::Continue;
    };
    match recursion::route(rec, &served.zones, msg.wire, peer, msg.transport, served.respond.edns_payload, out) {
        Route::Authoritative => Flow::Continue,
        Route::Answered(o) => Flow::Done(Action::Reply(o)),
        Route::Resolve(q, key) => Flow::Done(Action::Resolve(q, key)),
    }
}

/// Step 3: everything else, from the served zones.
fn authoritative(served: &Served, _: Option<&Recursion>, msg: &Message<'_>, out: &mut Vec<u8>) -> Flow {
    Flow::Done(Action::Reply(respond(&served.zones, msg.wire, msg.transport, &served.respond, out)))
}

/// The answer to a recursive miss the transport cannot queue (too many waiting, or
/// stopping): SERVFAIL now, rather than queueing without bound, with an Extended DNS Error
/// saying the resolver is busy ([`recursion::Failure::Busy`]). Counted as a resolver SERVFAIL
/// and in `pending_full_servfails`; returns the outcome to count on the transport's shard.
pub fn overloaded(rec: &Recursion, query: &Query, transport: Transport, edns_payload: u16, out: &mut Vec<u8>) -> Outcome {
    use std::sync::atomic::Ordering::Relaxed;
    rec.resolver.counters.servfails.fetch_add(1, Relaxed);
    rec.resolver.counters.pending_full_servfails.fetch_add(1, Relaxed);
    recursion::answer(query, Err(recursion::Failure::Busy), 0, transport, edns_payload, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A query for `name`/A with ID 0x1234, RD set, no EDNS.
    fn query(name: &str) -> Vec<u8> {
        let mut m = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
        for label in name.split('.').filter(|l| !l.is_empty()) {
            m.push(label.len() as u8);
            m.extend_from_slice(label.as_bytes());
        }
        m.extend_from_slice(&[0, 0, 1, 0, 1]);
        m
    }

    #[test]
    fn the_plan_answers_refuses_and_drops_as_respond_does() {
        let served = Served::default();
        let mut out = vec![0xff; 3];
        for transport in [Transport::Udp, Transport::Tcp] {
            // no zone and no resolver: the authoritative step answers REFUSED
            let msg = Message { wire: &query("www.example.org"), peer: None, transport, ends: Default::default() };
            let a = handle(&served, None, &LiveBlocks::default(), None, msg, &mut out);
            assert!(matches!(a, Action::Reply(Outcome::Answered { rcode: 5, qtype: 1, .. })), "{a:?}");
            assert_eq!(&out[..2], &[0x12, 0x34]);
            // the same bytes as xdns_zone::respond gives
            let mut direct = Vec::new();
            respond(&served.zones, msg.wire, transport, &served.respond, &mut direct);
            assert_eq!(out, direct);
            // a response (QR=1) gets nothing
            let mut resp = query("www.example.org");
            resp[2] |= 0x80;
            let a = handle(&served, None, &LiveBlocks::default(), None, Message { wire: &resp, peer: None, transport, ends: Default::default() }, &mut out);
            assert!(matches!(a, Action::Reply(Outcome::Dropped(_))), "{a:?}");
            assert!(out.is_empty());
            // garbage: dropped, never a panic
            let a = handle(&served, None, &LiveBlocks::default(), None, Message { wire: &[0xff; 5], peer: None, transport, ends: Default::default() }, &mut out);
            assert!(matches!(a, Action::Reply(Outcome::Dropped(_))), "{a:?}");
        }
    }
}
