//! TCP connection slots, shared fairly (RFC 7766 §6.2.2–6.2.3, RFC 7828).
//!
//! A server has `max_connections` slots over all its TCP listeners. One client must not be
//! able to take them all and keep them idle, as a plain limit lets it (the next client would be
//! refused until the idle ones time out). So:
//!
//! - **Per client.** A client (its IPv4 address, or its IPv6 /64) holds at most
//!   `max_per_client` connections. Its next one closes its own longest-idle connection to
//!   make room (`client_evicted`), or is refused when all of them are busy (`client_refused`).
//! - **When the slots are full**, a new connection closes the longest-idle connection of the
//!   client holding the most (`evicted`), so the newcomer is served at once, as Knot DNS does;
//!   only when no connection is idle is it refused (`refused`, as before).
//! - **Idle timeouts shrink under pressure**: up to half the slots in use, `idle_timeout_ms`;
//!   from there down linearly to `idle_min_ms` when all are in use. Clients that sent the
//!   edns-tcp-keepalive option (RFC 7828) are told the timeout in force with each answer.
//! - **Slow writers and slow readers**: a query must arrive whole, and an answer must be
//!   written, within `io_timeout_ms` of its first byte (`io_timeouts`); a connection's memory
//!   is bounded by `max_pipelined` answers waiting for the writer.
//!
//! A connection is *idle* while its reader waits for the next query and it owes the client no
//! answer. Evicting one is safe by RFC 7766 §6.2.3: a client must expect an idle connection to
//! be closed at any time and open another.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::config::TcpConfig;
use crate::stats::{Group, Snapshot};

/// How a client is told apart: an IPv4 address, or the /64 of an IPv6 address (one host's
/// usual allocation). IPv4-mapped IPv6 addresses count as IPv4.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Client(u128);

impl Client {
    pub fn of(ip: IpAddr) -> Self {
        match ip {
            IpAddr::V4(v4) => Client(u128::from(u32::from(v4))),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Client(u128::from(u32::from(v4))),
                None => Client(u128::from(v6) & !((1u128 << 64) - 1) | 1 << 32),
            },
        }
    }
}

/// One open connection, as the slots see it.
pub struct Conn {
    client: Client,
    /// Queries read and not yet answered.
    owed: AtomicUsize,
    /// When the reader started waiting for the next query (ns since `Slots::epoch`), or 0
    /// while it reads one.
    waiting_since: AtomicU64,
    /// Told to close (evicted).
    close: Notify,
}

impl Conn {
    /// The reader waits for the next query from now on.
    pub fn waiting(&self, slots: &Slots) {
        self.waiting_since.store(slots.now().max(1), Relaxed);
    }

    /// The reader has the first byte of a query.
    pub fn reading(&self) {
        self.waiting_since.store(0, Relaxed);
    }

    /// A query was read; its answer is owed.
    pub fn owe(&self) {
        self.owed.fetch_add(1, Relaxed);
    }

    /// An owed answer was written (or will not be).
    pub fn paid(&self) {
        let _ = self.owed.fetch_update(Relaxed, Relaxed, |n| n.checked_sub(1));
    }

    /// Resolves when the connection has been chosen for eviction.
    pub async fn evicted(&self) {
        self.close.notified().await
    }

    /// Since when it has been idle (ns since the epoch), if it is.
    fn idle_since(&self) -> Option<u64> {
        let since = self.waiting_since.load(Relaxed);
        (since != 0 && self.owed.load(Relaxed) == 0).then_some(since)
    }
}

/// Why a connection could not be given a slot.
#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    /// Every slot is taken and no connection is idle.
    Full,
    /// The client holds its share, all busy.
    Client,
}

/// The slots of every TCP listener of the server.
pub struct Slots {
    cfg: TcpConfig,
    epoch: Instant,
    open: Mutex<Open>,
    evicted: AtomicU64,
    client_evicted: AtomicU64,
    client_refused: AtomicU64,
    io_timeouts: AtomicU64,
}

#[derive(Default)]
struct Open {
    next_id: u64,
    conns: HashMap<u64, Arc<Conn>>,
    per_client: HashMap<Client, usize>,
}

/// A connection's slot, given back on drop.
pub struct Slot {
    slots: Arc<Slots>,
    id: u64,
    pub conn: Arc<Conn>,
}

impl Slot {
    /// The slots this one belongs to.
    pub fn slots(&self) -> &Slots {
        &self.slots
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self.slots.open.lock().unwrap_or_else(|e| e.into_inner());
        if open.conns.remove(&self.id).is_some() {
            if let Some(n) = open.per_client.get_mut(&self.conn.client) {
                *n -= 1;
                if *n == 0 {
                    open.per_client.remove(&self.conn.client);
                }
            }
        }
    }
}

impl Slots {
    pub fn new(cfg: TcpConfig) -> Arc<Self> {
        Arc::new(Self {
            cfg,
            epoch: Instant::now(),
            open: Mutex::default(),
            evicted: AtomicU64::new(0),
            client_evicted: AtomicU64::new(0),
            client_refused: AtomicU64::new(0),
            io_timeouts: AtomicU64::new(0),
        })
    }

    fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// A slot for a new connection from `ip`, closing an idle connection to make room when
    /// needed (see the module documentation).
    pub fn take(self: &Arc<Self>, ip: IpAddr) -> Result<Slot, Refused> {
        let client = Client::of(ip);
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let mine = open.per_client.get(&client).copied().unwrap_or(0);
        if mine >= self.cfg.max_per_client {
            match open.longest_idle(Some(client)) {
                Some(id) => {
                    open.evict(id);
                    self.client_evicted.fetch_add(1, Relaxed);
                }
                None => {
                    self.client_refused.fetch_add(1, Relaxed);
                    return Err(Refused::Client);
                }
            }
        } else if open.conns.len() >= self.cfg.max_connections {
            let heaviest = open.per_client.iter().max_by_key(|(_, &n)| n).map(|(&c, _)| c);
            match open.longest_idle(heaviest).or_else(|| open.longest_idle(None)) {
                Some(id) => {
                    open.evict(id);
                    self.evicted.fetch_add(1, Relaxed);
                }
                None => return Err(Refused::Full),
            }
        }
        let id = open.next_id;
        open.next_id += 1;
        let conn = Arc::new(Conn {
            client,
            owed: AtomicUsize::new(0),
            waiting_since: AtomicU64::new(self.now().max(1)),
            close: Notify::new(),
        });
        open.conns.insert(id, conn.clone());
        *open.per_client.entry(client).or_default() += 1;
        Ok(Slot { slots: self.clone(), id, conn })
    }

    /// The idle timeout in force now: `idle_timeout_ms` up to half the slots in use, then
    /// down linearly to `idle_min_ms` when all are in use.
    pub fn idle_timeout(&self) -> Duration {
        let used = self.open.lock().unwrap_or_else(|e| e.into_inner()).conns.len();
        Duration::from_millis(shrunk(&self.cfg, used))
    }

    /// How long one query may take to arrive, and one answer to be written.
    pub fn io_timeout(&self) -> Duration {
        Duration::from_millis(self.cfg.io_timeout_ms)
    }

    /// A connection was closed because a query or an answer took longer than the I/O timeout.
    pub fn io_timed_out(&self) {
        self.io_timeouts.fetch_add(1, Relaxed);
    }

    /// The `tcp_slots` counter group.
    pub fn snapshot(&self, s: &mut Snapshot) {
        let values = [
            ("evicted", &self.evicted),
            ("client_evicted", &self.client_evicted),
            ("client_refused", &self.client_refused),
            ("io_timeouts", &self.io_timeouts),
        ]
        .map(|(k, v)| (k.to_string(), v.load(Relaxed)));
        s.groups.insert(
            "tcp_slots".into(),
            Group::counters(
                "TCP connections closed to make room (evicted: longest idle when full; client_evicted: the client's own, over its share), refused at the client's share (client_refused), closed for slow I/O (io_timeouts).",
                "counter",
                values,
            ),
        );
    }
}

impl Open {
    /// The connection idle the longest, of `client` or of anyone.
    fn longest_idle(&self, client: Option<Client>) -> Option<u64> {
        self.conns
            .iter()
            .filter(|(_, c)| client.is_none_or(|k| c.client == k))
            .filter_map(|(&id, c)| Some((c.idle_since()?, id)))
            .min()
            .map(|(_, id)| id)
    }

    /// Close connection `id` and give its slot to the caller at once (its task frees nothing
    /// more when it ends).
    fn evict(&mut self, id: u64) {
        if let Some(c) = self.conns.remove(&id) {
            c.close.notify_one();
            if let Some(n) = self.per_client.get_mut(&c.client) {
                *n -= 1;
                if *n == 0 {
                    self.per_client.remove(&c.client);
                }
            }
        }
    }
}

/// The idle timeout (ms) with `used` of the slots in use.
fn shrunk(cfg: &TcpConfig, used: usize) -> u64 {
    let max = cfg.max_connections.max(1) as u64;
    let used = (used as u64).min(max);
    let half = max / 2;
    let (hi, lo) = (cfg.idle_timeout_ms, cfg.idle_min_ms.min(cfg.idle_timeout_ms));
    if used <= half {
        return hi;
    }
    hi - (hi - lo) * (used - half) / (max - half).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(max: usize, per_client: usize) -> TcpConfig {
        TcpConfig { max_connections: max, max_per_client: per_client, ..TcpConfig::default() }
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn clients_are_addresses_or_ipv6_64s() {
        assert_eq!(Client::of(ip("198.18.0.1")), Client::of(ip("::ffff:198.18.0.1")));
        assert_ne!(Client::of(ip("198.18.0.1")), Client::of(ip("198.18.0.2")));
        assert_eq!(Client::of(ip("2001:db8:0:1::1")), Client::of(ip("2001:db8:0:1::99")));
        assert_ne!(Client::of(ip("2001:db8:0:1::1")), Client::of(ip("2001:db8:0:2::1")));
        // an IPv6 /64 never equals an IPv4 address
        assert_ne!(Client::of(ip("::c612:1")), Client::of(ip("198.18.0.1")));
    }

    #[test]
    fn a_client_over_its_share_closes_its_own_longest_idle() {
        let slots = Slots::new(cfg(100, 2));
        let a1 = slots.take(ip("198.18.0.1")).unwrap();
        let a2 = slots.take(ip("198.18.0.1")).unwrap();
        a2.conn.waiting(&slots);
        std::thread::sleep(Duration::from_millis(2));
        a1.conn.waiting(&slots); // a2 has been idle longer
        let _a3 = slots.take(ip("198.18.0.1")).unwrap();
        assert_eq!(slots.client_evicted.load(Relaxed), 1);
        assert_eq!(slots.open.lock().unwrap().per_client[&Client::of(ip("198.18.0.1"))], 2);
        // a2 was told to close: its notification is stored
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        let told = rt.block_on(async { tokio::time::timeout(Duration::from_millis(50), a2.conn.evicted()).await.is_ok() });
        assert!(told, "the longest-idle connection is closed");
        let not_told = rt.block_on(async { tokio::time::timeout(Duration::from_millis(20), a1.conn.evicted()).await.is_ok() });
        assert!(!not_told);
        // all busy (reading a query, or owing an answer): refused
        a1.conn.reading();
        _a3.conn.owe();
        assert_eq!(slots.take(ip("198.18.0.1")).err(), Some(Refused::Client));
        assert_eq!(slots.client_refused.load(Relaxed), 1);
        // another client is not affected
        assert!(slots.take(ip("198.18.0.9")).is_ok());
    }

    #[test]
    fn full_slots_evict_the_heaviest_clients_longest_idle() {
        let slots = Slots::new(cfg(4, 3));
        let good = slots.take(ip("198.18.0.2")).unwrap();
        good.conn.waiting(&slots); // idle the longest of all
        std::thread::sleep(Duration::from_millis(2));
        let heavy: Vec<Slot> = (0..3).map(|_| slots.take(ip("198.18.0.66")).unwrap()).collect();
        for h in &heavy {
            h.conn.waiting(&slots);
        }
        let newcomer = slots.take(ip("198.18.0.3")).unwrap();
        assert_eq!(slots.evicted.load(Relaxed), 1);
        let open = slots.open.lock().unwrap();
        assert_eq!(open.per_client[&Client::of(ip("198.18.0.66"))], 2, "the heavy client lost one");
        assert_eq!(open.per_client[&Client::of(ip("198.18.0.2"))], 1, "the light client kept its own");
        assert_eq!(open.conns.len(), 4);
        drop(open);
        // nothing idle: full
        for h in &heavy {
            h.conn.reading();
        }
        good.conn.reading();
        newcomer.conn.reading();
        assert_eq!(slots.take(ip("198.18.0.4")).err(), Some(Refused::Full));
        // dropping slots gives them back, an evicted one only once
        drop(heavy);
        assert_eq!(slots.open.lock().unwrap().conns.len(), 2);
        assert!(!slots.open.lock().unwrap().per_client.contains_key(&Client::of(ip("198.18.0.66"))));
    }

    #[test]
    fn idle_timeout_shrinks_past_half_the_slots() {
        let c = TcpConfig { max_connections: 100, idle_timeout_ms: 10_000, idle_min_ms: 1_000, ..TcpConfig::default() };
        assert_eq!(shrunk(&c, 0), 10_000);
        assert_eq!(shrunk(&c, 50), 10_000);
        assert_eq!(shrunk(&c, 75), 5_500);
        assert_eq!(shrunk(&c, 100), 1_000);
        assert_eq!(shrunk(&c, 500), 1_000);
        let tiny = TcpConfig { max_connections: 1, idle_timeout_ms: 300, idle_min_ms: 1_000, ..TcpConfig::default() };
        assert_eq!(shrunk(&tiny, 1), 300, "the floor never raises the timeout");
    }
}
