//! Fetch quotas: how many upstream queries may be outstanding at once to one server and to
//! one zone (its cut name), each bound adapting to how the server or zone answers.
//!
//! The rule (additive increase, multiplicative decrease, per outcome):
//! - every bound starts at its ceiling (`fetches_per_server`, `fetches_per_zone`);
//! - a reply (any RCODE) raises the bound by 1, up to the ceiling;
//! - a query that got no reply lowers it by a sixteenth (at least 1), down to the floor
//!   ([`Limits::floor`], `fetches_floor`): a dead server falls from 1,000 to the floor after
//!   about 70 timeouts, a fraction of a second under a flood, and keeps that many probes so
//!   that its first replies raise it again (each reply lets one more query out, so the bound
//!   grows back as fast as the server answers);
//! - the equilibrium of a server that loses a fraction `p` of queries is
//!   `16 (1 - p) / p` (1 % lost: the ceiling; 10 %: 144; 50 %: 16).
//!
//! An upstream query needs a slot of its zone and of its server. A server at its bound is
//! skipped (another server of the zone may have room); a zone at its bound, or every server
//! of it at theirs, fails the question at once with [`super::ResolveError::Quota`] (SERVFAIL
//! with an Extended DNS Error, or a stale answer) instead of waiting. This is BIND's
//! `fetches-per-server` / `fetches-per-zone` idea, on by default, with the adaptation applied
//! per outcome rather than per window of 100 queries, and to zones as well as servers.
//!
//! Entries back at their ceiling with nothing outstanding are forgotten, so the maps hold only
//! servers and zones that are busy or have misbehaved (bounded by `infra_entries`).

use std::net::IpAddr;
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use hashbrown::HashMap;

use crate::store::{lock, make_room};

/// The bounds in force.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Ceiling of a server's bound (0: no bound per server).
    pub server: u32,
    /// Ceiling of a zone's bound (0: no bound per zone).
    pub zone: u32,
    /// Lowest bound a server or zone is lowered to.
    pub floor: u32,
}

/// One server's or zone's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Quota {
    /// Queries outstanding now.
    pub inflight: u32,
    /// How many may be.
    pub limit: u32,
}

impl Quota {
    /// A fresh state at the ceiling `max`.
    pub fn new(max: u32) -> Quota {
        Quota {
            inflight: 0,
            limit: max,
        }
    }

    /// A reply came: one more allowed, up to `max`.
    pub fn answered(&mut self, max: u32) {
        self.limit = self.limit.saturating_add(1).min(max);
    }

    /// No reply: a sixteenth fewer allowed (at least one), down to `floor`.
    pub fn timed_out(&mut self, floor: u32) {
        let cut = (self.limit / 16).max(1);
        self.limit = self.limit.saturating_sub(cut).max(floor.min(self.limit));
    }
}

/// Why no slot was given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// The zone has its bound of queries outstanding.
    Zone,
    /// The server has its bound of queries outstanding.
    Server,
}

/// Outstanding upstream queries per server and per zone.
#[derive(Debug)]
pub struct Fetches {
    servers: Mutex<HashMap<IpAddr, Quota>>,
    zones: Mutex<HashMap<Vec<u8>, Quota>>,
    server_max: AtomicU32,
    zone_max: AtomicU32,
    floor: AtomicU32,
    capacity: usize,
}

impl Fetches {
    /// Empty, with these bounds; each map holds at most `capacity` entries.
    pub fn new(limits: Limits, capacity: usize) -> Arc<Fetches> {
        let f = Arc::new(Fetches {
            servers: Mutex::new(HashMap::new()),
            zones: Mutex::new(HashMap::new()),
            server_max: AtomicU32::new(0),
            zone_max: AtomicU32::new(0),
            floor: AtomicU32::new(1),
            capacity: capacity.max(16),
        });
        f.set_limits(limits);
        f
    }

    /// New bounds (reload): bounds above a new ceiling come down to it at their next outcome.
    pub fn set_limits(&self, l: Limits) {
        self.server_max.store(l.server, Relaxed);
        self.zone_max.store(l.zone, Relaxed);
        self.floor.store(l.floor.max(1), Relaxed);
    }

    fn limits(&self) -> Limits {
        Limits {
            server: self.server_max.load(Relaxed),
            zone: self.zone_max.load(Relaxed),
            floor: self.floor.load(Relaxed),
        }
    }

    /// A slot for one query to `server` for `zone` (`None`: no zone bound, as when
    /// forwarding), or why not. The slot is given back when dropped.
    pub fn acquire(self: &Arc<Self>, zone: Option<&[u8]>, server: IpAddr) -> Result<Slot, Refused> {
        let l = self.limits();
        let zone = zone.filter(|_| l.zone > 0);
        if let Some(z) = zone {
            let zones = lock(&self.zones);
            if let Some(q) = zones.get(z) {
                if q.inflight >= q.limit.min(l.zone) {
                    return Err(Refused::Zone);
                }
            }
        }
        if l.server > 0 {
            let mut servers = lock(&self.servers);
            let q = match servers.get_mut(&server) {
                Some(q) => q,
                None => {
                    make_room(&mut servers, self.capacity, |q| q.inflight == 0);
                    servers.entry(server).or_insert(Quota::new(l.server))
                }
            };
            if q.inflight >= q.limit.min(l.server) {
                return Err(Refused::Server);
            }
            q.inflight += 1;
        }
        if let Some(z) = zone {
            let mut zones = lock(&self.zones);
            let q = match zones.get_mut(z) {
                Some(q) => q,
                None => {
                    make_room(&mut zones, self.capacity, |q| q.inflight == 0);
                    zones.entry(z.to_vec()).or_insert(Quota::new(l.zone))
                }
            };
            // Checked above; another task may have taken the last slot meanwhile: a slot
            // more than the bound, for one query, is harmless.
            q.inflight += 1;
        }
        Ok(Slot {
            fetches: self.clone(),
            zone: zone.map(<[u8]>::to_vec),
            server: (l.server > 0).then_some(server),
            outcome: None,
        })
    }

    fn release(&self, zone: Option<&[u8]>, server: Option<IpAddr>, outcome: Option<bool>) {
        let l = self.limits();
        if let Some(s) = server {
            let mut servers = lock(&self.servers);
            if let Some(q) = servers.get_mut(&s) {
                settle(q, outcome, l.server, l.floor);
                if q.inflight == 0 && q.limit >= l.server {
                    servers.remove(&s);
                }
            }
        }
        if let Some(z) = zone {
            let mut zones = lock(&self.zones);
            if let Some(q) = zones.get_mut(z) {
                settle(q, outcome, l.zone, l.floor);
                if q.inflight == 0 && q.limit >= l.zone {
                    zones.remove(z);
                }
            }
        }
    }

    /// The state of `server` (`None`: unknown, hence at its ceiling with nothing outstanding).
    pub fn server(&self, server: IpAddr) -> Option<Quota> {
        lock(&self.servers).get(&server).copied()
    }

    /// The state of `zone`.
    pub fn zone(&self, zone: &[u8]) -> Option<Quota> {
        lock(&self.zones).get(zone).copied()
    }

    /// Gauges: servers and zones whose bound is below the ceiling, queries outstanding.
    pub fn gauges(&self) -> [(&'static str, u64); 3] {
        let l = self.limits();
        let servers = lock(&self.servers);
        let limited_servers = servers.values().filter(|q| q.limit < l.server).count();
        let inflight: u64 = servers.values().map(|q| u64::from(q.inflight)).sum();
        drop(servers);
        let limited_zones = lock(&self.zones)
            .values()
            .filter(|q| q.limit < l.zone)
            .count();
        [
            ("fetch_servers_limited", limited_servers as u64),
            ("fetch_zones_limited", limited_zones as u64),
            ("fetch_outstanding", inflight),
        ]
    }

    /// Forgets every bound (flush).
    pub fn clear(&self) {
        lock(&self.servers).retain(|_, q| q.inflight > 0);
        lock(&self.zones).retain(|_, q| q.inflight > 0);
        let l = self.limits();
        for q in lock(&self.servers).values_mut() {
            q.limit = l.server;
        }
        for q in lock(&self.zones).values_mut() {
            q.limit = l.zone;
        }
    }
}

/// Applies one query's end to its server's or zone's state.
fn settle(q: &mut Quota, outcome: Option<bool>, max: u32, floor: u32) {
    q.inflight = q.inflight.saturating_sub(1);
    match outcome {
        Some(true) => q.answered(max),
        Some(false) => q.timed_out(floor),
        None => q.limit = q.limit.min(max),
    }
}

/// One outstanding upstream query's place in its server's and zone's bounds. Dropped without
/// an outcome (the query was never sent, or another server answered first), it only frees
/// the place.
#[derive(Debug)]
pub struct Slot {
    fetches: Arc<Fetches>,
    zone: Option<Vec<u8>>,
    server: Option<IpAddr>,
    outcome: Option<bool>,
}

impl Slot {
    /// The query got a reply (`true`) or none in time (`false`).
    pub fn finish(mut self, replied: bool) {
        self.outcome = Some(replied);
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.fetches
            .release(self.zone.as_deref(), self.server, self.outcome);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(q: &mut Quota, seq: &str, max: u32, floor: u32) -> Vec<u32> {
        seq.chars()
            .map(|c| {
                match c {
                    'a' => q.answered(max),
                    't' => q.timed_out(floor),
                    _ => unreachable!(),
                }
                q.limit
            })
            .collect()
    }

    /// The rule on recorded sequences of replies (a) and timeouts (t).
    #[test]
    fn aimd_on_recorded_sequences() {
        // (start, sequence, ceiling, floor, bound after each outcome)
        let table: &[(u32, &str, u32, u32, &[u32])] = &[
            // replies never go above the ceiling
            (1000, "aaa", 1000, 2, &[1000, 1000, 1000]),
            // a timeout takes a sixteenth
            (1000, "t", 1000, 2, &[938]),
            (938, "tt", 1000, 2, &[880, 825]),
            // small bounds lose at least one, never below the floor
            (10, "tttttttttt", 1000, 2, &[9, 8, 7, 6, 5, 4, 3, 2, 2, 2]),
            // and each reply gives one back
            (2, "aaat", 1000, 2, &[3, 4, 5, 4]),
            // a floor above the bound does not raise it
            (3, "t", 1000, 5, &[3]),
            // a reply after a lowered ceiling (reload) brings the bound down to it
            (900, "a", 500, 2, &[500]),
        ];
        for (start, seq, max, floor, want) in table {
            let mut q = Quota {
                inflight: 0,
                limit: *start,
            };
            assert_eq!(run(&mut q, seq, *max, *floor), *want, "{start} {seq}");
        }
    }

    /// A dead server (every query times out) falls from the ceiling to the floor within the
    /// first flood wave; a healthy one losing 1 % stays at the ceiling; the equilibrium of a
    /// 10 % loss is about 144.
    #[test]
    fn dead_lossy_and_healthy_servers() {
        let mut dead = Quota::new(1000);
        let n = (0..1000).take_while(|_| {
            dead.timed_out(2);
            dead.limit > 2
        });
        assert!(n.count() < 100);
        assert_eq!(dead.limit, 2);

        let mut healthy = Quota::new(1000);
        for i in 0..100_000 {
            if i % 100 == 0 {
                healthy.timed_out(2)
            } else {
                healthy.answered(1000)
            }
        }
        assert!(healthy.limit >= 990, "{}", healthy.limit);

        let mut lossy = Quota::new(1000);
        for i in 0..100_000 {
            if i % 10 == 0 {
                lossy.timed_out(2)
            } else {
                lossy.answered(1000)
            }
        }
        assert!((120..=170).contains(&lossy.limit), "{}", lossy.limit);

        // a dead server coming back: its bound grows with its replies
        for _ in 0..998 {
            dead.answered(1000);
        }
        assert_eq!(dead.limit, 1000);
    }

    #[test]
    fn slots_bound_servers_and_zones() {
        let ip: IpAddr = "192.0.2.1".parse().unwrap();
        let ip2: IpAddr = "192.0.2.2".parse().unwrap();
        let f = Fetches::new(
            Limits {
                server: 3,
                zone: 4,
                floor: 1,
            },
            100,
        );
        let z = b"\x04dead\x03lab\x00".as_slice();
        let held: Vec<Slot> = (0..3).map(|_| f.acquire(Some(z), ip).unwrap()).collect();
        assert_eq!(f.acquire(Some(z), ip).unwrap_err(), Refused::Server);
        // another server of the zone has room, up to the zone's bound
        let h2 = f.acquire(Some(z), ip2).unwrap();
        assert_eq!(f.acquire(Some(z), ip2).unwrap_err(), Refused::Zone);
        // no zone bound (forwarding): only the server's
        let h3 = f.acquire(None, ip2).unwrap();
        assert_eq!(f.zone(z).unwrap().inflight, 4);
        // timeouts lower both bounds; a slot dropped without an outcome only frees its place
        for s in held {
            s.finish(false);
        }
        assert_eq!(
            f.server(ip).unwrap(),
            Quota {
                inflight: 0,
                limit: 1
            }
        );
        drop(h2);
        drop(h3);
        let zq = f.zone(z).unwrap();
        assert_eq!(
            zq,
            Quota {
                inflight: 0,
                limit: 1
            }
        );
        assert_eq!(
            f.gauges()[..2],
            [("fetch_servers_limited", 1), ("fetch_zones_limited", 1)]
        );
        let s = f.acquire(Some(z), ip).unwrap();
        assert_eq!(f.acquire(Some(z), ip2).unwrap_err(), Refused::Zone);
        // replies raise them again; back at the ceiling and idle, the entries are forgotten
        s.finish(true);
        for _ in 0..4 {
            f.acquire(Some(z), ip).unwrap().finish(true);
        }
        assert_eq!(f.server(ip), None);
        assert_eq!(f.zone(z), None);
        // 0 turns a bound off
        let off = Fetches::new(
            Limits {
                server: 0,
                zone: 0,
                floor: 1,
            },
            100,
        );
        let many: Vec<Slot> = (0..10_000)
            .map(|_| off.acquire(Some(z), ip).unwrap())
            .collect();
        assert_eq!(many.len(), 10_000);
        assert_eq!(off.server(ip), None);
    }
}
