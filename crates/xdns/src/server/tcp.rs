//! DNS over TCP (RFC 7766) on tokio: 2-byte length framing, pipelining, idle timeout and a
//! connection limit.
//!
//! Each connection has a reader and a writer. The reader reads framed queries and answers each
//! as soon as it is read; answers go to the writer through a channel of `max_pipelined` slots,
//! so a client that sends many queries without reading answers stalls its own reader rather
//! than growing memory. The writer batches whatever answers are ready into one flush.
//! Connection slots are shared fairly between clients ([`super::slots`]): a client's share,
//! eviction of the longest-idle connection when the slots are full, an idle timeout that
//! shrinks under pressure and is advertised with edns-tcp-keepalive (RFC 7828), and an I/O
//! timeout within which a query must arrive and an answer be written. Answers are never
//! truncated on TCP.
//! On shutdown (SIGTERM, or a new process taking over the listener), the listener stops;
//! each reader answers what is already arriving and stops once its connection has been quiet
//! for 200 ms (at most 1 s after the stop); pending answers are written and the connections
//! close (all within 5 s).

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt, BufWriter};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch, Semaphore};
use tokio::task::JoinSet;
use xdns_zone::{Outcome, Transport};

use super::slots::{Slot, Slots};
use super::{stopped, Shared};
use crate::config::TcpConfig;
use crate::query::{self, Action, Message};
use crate::recursion;
use crate::stats::{DropKind, Shard};

/// How long shutdown waits for open connections to finish their pending answers.
const DRAIN: Duration = Duration::from_secs(5);
/// Once stopping, how long a connection waits for one more query before it closes.
const LINGER: Duration = Duration::from_millis(200);
/// Once stopping, how long a connection that keeps sending queries is still read: then it is
/// closed after its answers, and its client sends the rest elsewhere (RFC 7766 6.2.1).
const LAST_READ: Duration = Duration::from_secs(1);

/// Create a listening TCP socket (blocking std socket, to be handed to tokio).
pub fn bind(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let sock = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    sock.set_reuse_address(true)?;
    if addr.is_ipv6() {
        sock.set_only_v6(true)?;
    }
    sock.set_nonblocking(true)?;
    sock.bind(&addr.into())?;
    sock.listen(1024)?;
    Ok(sock.into())
}

/// Accept and serve connections on `listener` until shutdown, then drain. `slots` are shared
/// by every TCP listener of the server (see [`super::slots`]).
pub async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    cfg: TcpConfig,
    slots: Arc<Slots>,
    mut shutdown: watch::Receiver<bool>,
) {
    let shard = shared.stats.shard();
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            _ = stopped(&mut shutdown) => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            r = listener.accept() => match r {
                Ok((stream, peer)) => {
                    let Ok(slot) = slots.take(peer.ip()) else {
                        shared.stats.tcp_refused.fetch_add(1, Relaxed);
                        drop(stream);
                        continue;
                    };
                    shared.stats.tcp_accepted.fetch_add(1, Relaxed);
                    shared.stats.tcp_open.fetch_add(1, Relaxed);
                    let shared = shared.clone();
                    let shard = shard.clone();
                    let cfg = cfg.clone();
                    let shutdown = shutdown.clone();
                    conns.spawn(async move {
                        connection(stream, peer, &shared, &shard, &cfg, &slot, shutdown).await;
                        shared.stats.tcp_open.fetch_sub(1, Relaxed);
                        drop(slot);
                    });
                }
                Err(e) => {
                    // Out of descriptors and similar: back off instead of spinning.
                    tracing::warn!(error = %e, "TCP accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }
    drop(listener);
    if tokio::time::timeout(DRAIN, async { while conns.join_next().await.is_some() {} })
        .await
        .is_err()
    {
        conns.abort_all();
    }
}

/// An answer for the writer, and whether the client asked for edns-tcp-keepalive.
type Outgoing = (Vec<u8>, bool);

/// Serve one connection until the client closes it, it idles out, its slot is given to
/// another connection (it was idle the longest), or shutdown.
async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    shared: &Shared,
    shard: &Shard,
    cfg: &TcpConfig,
    slot: &Slot,
    mut shutdown: watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    let local = stream.local_addr().ok();
    let slots = slot.slots();
    let conn = &slot.conn;
    let io = slots.io_timeout();
    let (mut rd, wr) = stream.into_split();
    let (tx, mut rx) = mpsc::channel::<Outgoing>(cfg.max_pipelined.max(1));
    let writer = async move {
        let mut w = BufWriter::new(wr);
        'outer: while let Some(out) = rx.recv().await {
            let mut next = Some(out);
            while let Some((mut a, keepalive)) = next.take() {
                if keepalive {
                    // RFC 7828: the idle timeout in force now, in units of 100 ms
                    let t = (slots.idle_timeout().as_millis() / 100).min(u128::from(u16::MAX)) as u16;
                    xdns_wire::opt::push_option(&mut a, xdns_wire::opt::TCP_KEEPALIVE, &t.to_be_bytes());
                }
                let frame = async {
                    w.write_all(&(a.len() as u16).to_be_bytes()).await?;
                    w.write_all(&a).await
                };
                // a client that does not read its answers holds the slot no longer than this
                if !matches!(tokio::time::timeout(io, frame).await, Ok(Ok(()))) {
                    slots.io_timed_out();
                    break 'outer;
                }
                conn.paid();
                next = rx.try_recv().ok();
            }
            if !matches!(tokio::time::timeout(io, w.flush()).await, Ok(Ok(()))) {
                slots.io_timed_out();
                break;
            }
        }
        let _ = tokio::time::timeout(io, w.shutdown()).await;
    };
    let resolving = Arc::new(Semaphore::new(cfg.max_pipelined.max(1)));
    let reader = async move {
        let mut query = Vec::new();
        let mut draining = (*shutdown.borrow()).then(tokio::time::Instant::now);
        loop {
            // Wait for the next query without reading it (cancel-safe): a stop while a length
            // prefix is half read must not lose its first byte. Once stopping, queries that
            // arrive within `LINGER` are still answered (one already on its way when a
            // takeover or SIGTERM lands must not be dropped), for at most `LAST_READ`; then
            // the connection closes once its answers are written.
            let wait = match draining {
                Some(since) => match LAST_READ.checked_sub(since.elapsed()) {
                    Some(left) => left.min(LINGER),
                    None => break,
                },
                None => slots.idle_timeout(),
            };
            conn.waiting(slots);
            let mut first = [0u8; 1];
            let ready = tokio::select! {
                _ = stopped(&mut shutdown), if draining.is_none() => {
                    draining = Some(tokio::time::Instant::now());
                    continue;
                }
                // idle the longest when another client needed the slot (counted by the slots)
                _ = conn.evicted() => break,
                r = tokio::time::timeout(wait, rd.peek(&mut first)) => r,
            };
            match ready {
                Ok(Ok(n)) if n > 0 => {}
                Ok(_) => break,
                Err(_) if draining.is_some() => break,
                Err(_) => {
                    shared.stats.tcp_idle_closed.fetch_add(1, Relaxed);
                    break;
                }
            }
            // From its first byte, a query must arrive whole within the I/O timeout: a client
            // that sends half a message holds the slot no longer than that.
            conn.reading();
            let whole = async {
                let len = rd.read_u16().await? as usize;
                query.resize(len, 0);
                rd.read_exact(&mut query).await
            };
            match tokio::time::timeout(io, whole).await {
                Ok(Ok(_)) => {}
                Ok(Err(_)) => break,
                Err(_) => {
                    slots.io_timed_out();
                    break;
                }
            }
            let keepalive = xdns_wire::opt::option(&query, xdns_wire::opt::TCP_KEEPALIVE).is_some();
            conn.owe();
            let mut answer = Vec::new();
            let recursion = shared.recursion.get();
            let ends = match crate::dnstap::enabled() {
                true => crate::dnstap::Ends { client: Some(peer), server: local },
                false => Default::default(),
            };
            let msg = Message { wire: &query, peer: Some(peer.ip()), transport: Transport::Tcp, ends };
            let action = query::handle(&shared.served.load(), shared.guard.load().as_deref(), &shared.live_blocks, recursion.map(|r| &**r), msg, &mut answer);
            match action {
                // A recursive miss: resolved in a task of its own, answered when ready (RFC 7766
                // allows answers out of order); at most `max_pipelined` at once per connection.
                Action::Resolve(q, key) => {
                    let (Some(rec), Ok(permit)) =
                        (recursion.cloned(), resolving.clone().acquire_owned().await)
                    else {
                        break;
                    };
                    let tx = tx.clone();
                    let payload = shared.served.load().respond.edns_payload;
                    tokio::spawn(async move {
                        let (answer, outcome) =
                            recursion::resolve_and_answer(&rec, &q, key, Transport::Tcp, payload, None)
                                .await;
                        crate::dnstap::client_response(ends, crate::dnstap::Proto::Tcp, &answer, None);
                        rec.shard.record(Transport::Tcp, outcome);
                        let _ = tx.send((answer, keepalive)).await;
                        drop(permit);
                    });
                }
                Action::Reply(outcome) => {
                    shard.record(Transport::Tcp, outcome);
                    if !matches!(outcome, Outcome::Answered { .. }) || answer.is_empty() {
                        conn.paid();
                        continue;
                    }
                    if answer.len() > usize::from(u16::MAX) {
                        shard.drop(DropKind::TooLarge);
                        conn.paid();
                        continue;
                    }
                    if tx.send((answer, keepalive)).await.is_err() {
                        break;
                    }
                }
                // A zone transfer out: its messages in order, each owed and paid like an
                // answer, through the same bounded channel (a slow client slows the transfer).
                Action::Transfer(mut t) => {
                    shard.record(Transport::Tcp, t.outcome);
                    let mut first = true;
                    let mut closed = false;
                    while let Some(m) = t.next() {
                        if !std::mem::take(&mut first) {
                            conn.owe();
                        }
                        if tx.send((m, false)).await.is_err() {
                            closed = true;
                            break;
                        }
                    }
                    if first {
                        conn.paid();
                    }
                    if closed {
                        break;
                    }
                }
                Action::Fail | Action::Drop(_) => {
                    action.record(shard, Transport::Tcp);
                    conn.paid();
                }
            }
        }
        // Dropping `tx` lets the writer finish the pending answers and close.
    };
    tokio::join!(reader, writer);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server on a loopback port: its address, shared state, stop switch and task.
    fn start(
        max_connections: usize,
        idle_timeout_ms: u64,
    ) -> (SocketAddr, Arc<Shared>, watch::Sender<bool>, tokio::task::JoinHandle<()>) {
        let std_listener = bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = std_listener.local_addr().unwrap();
        let listener = TcpListener::from_std(std_listener).unwrap();
        let shared = Arc::new(Shared::new(Default::default()));
        let (stop_tx, stop_rx) = watch::channel(false);
        let cfg = TcpConfig { idle_timeout_ms, max_connections, max_pipelined: 4, ..TcpConfig::default() };
        let slots = Slots::new(cfg.clone());
        let task = tokio::spawn(serve(listener, shared.clone(), cfg, slots, stop_rx));
        (addr, shared, stop_tx, task)
    }

    /// Wait until the server has accepted `n` connections.
    async fn wait_open(shared: &Shared, n: u64) {
        for _ in 0..100 {
            if shared.stats.tcp_open.load(Relaxed) == n {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Bytes read from `c` before it closes or 5 s pass: 0 when the server closed it.
    async fn read_until_closed(c: &mut TcpStream) -> usize {
        let mut buf = [0u8; 1];
        tokio::time::timeout(Duration::from_secs(5), c.read(&mut buf))
            .await
            .unwrap()
            .unwrap_or(0)
    }

    #[tokio::test]
    async fn a_newcomer_takes_the_slot_of_an_idle_connection_and_drains_on_shutdown() {
        let (addr, shared, stop_tx, task) = start(1, 60_000);
        let mut idle = TcpStream::connect(addr).await.unwrap();
        wait_open(&shared, 1).await;
        let _second = TcpStream::connect(addr).await.unwrap();
        let n = read_until_closed(&mut idle).await;
        assert_eq!(n, 0, "the idle connection must be closed for the newcomer");
        assert_eq!(shared.stats.tcp_refused.load(Relaxed), 0);
        // the newcomer is busy (half a length prefix sent): the next one is refused
        _second.try_write(&[0]).unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut third = TcpStream::connect(addr).await.unwrap();
        assert_eq!(read_until_closed(&mut third).await, 0, "no idle connection: refused");
        assert_eq!(shared.stats.tcp_refused.load(Relaxed), 1);

        stop_tx.send(true).unwrap();
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(shared.stats.tcp_open.load(Relaxed), 0);
    }

    /// A query that arrives just after shutdown began (a takeover or SIGTERM) on an open
    /// connection is still answered; the quiet connection then closes.
    #[tokio::test]
    async fn query_arriving_while_stopping_is_answered() {
        let (addr, shared, stop_tx, task) = start(4, 60_000);
        let mut c = TcpStream::connect(addr).await.unwrap();
        wait_open(&shared, 1).await;
        stop_tx.send(true).unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
        // One byte of the length first: a stop between the two must not lose it.
        let q = [
            0x12, 0x34, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 3, b'w', b'w', b'w', 0, 0, 1, 0, 1,
        ];
        c.write_all(&[0]).await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
        c.write_all(&[q.len() as u8]).await.unwrap();
        c.write_all(&q).await.unwrap();
        let len = tokio::time::timeout(Duration::from_secs(5), c.read_u16())
            .await
            .unwrap()
            .unwrap();
        let mut a = vec![0; len as usize];
        c.read_exact(&mut a).await.unwrap();
        assert_eq!(a[..2], [0x12, 0x34], "the answer to our query");
        let n = read_until_closed(&mut c).await;
        assert_eq!(n, 0, "closed once quiet");
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .unwrap()
            .unwrap();
    }

    #[tokio::test]
    async fn idle_connection_is_closed() {
        let (addr, shared, _stop_tx, _task) = start(4, 100);
        let mut c = TcpStream::connect(addr).await.unwrap();
        let t0 = std::time::Instant::now();
        let n = read_until_closed(&mut c).await;
        assert_eq!(n, 0);
        assert!(t0.elapsed() >= Duration::from_millis(90));
        assert_eq!(shared.stats.tcp_idle_closed.load(Relaxed), 1);
    }
}
