//! Kernel iteration's next-hop table (issue 32; bpf/README.md, "Kernel iteration"):
//! `xdns_kit_hops`, server address → (out interface, our MAC, the next hop's MAC, expiry),
//! which the kernel uses when `bpf_fib_lookup` gives no next hop. It gives none for any
//! lookup from an interface whose forwarding is off, the default on every host
//! (`BPF_FIB_LKUP_RET_FWD_DISABLED`, even as the host's own output), so without the table a
//! default host would hand every miss to userspace (`kit.handover_fib`).
//!
//! [`HopWriter::refresh`] runs every second ([`TICK`]) on a thread of its own:
//! - the servers: every address of the kernel's zone map (the root's, the cuts the daemon
//!   copies from the resolver's delegation cache, and those the kernel learnt from referrals
//!   it followed), read in batches;
//! - their routes (`RTM_GETROUTE`, one per address: the out interface and the gateway, or
//!   on-link), a new address first, then the longest unasked, at most [`ROUTES_PER_TICK`]
//!   per second: the work per second is bounded whatever the delegation cache holds (the
//!   zone map holds 4096 cuts of at most 8 addresses: every route asked again within a
//!   minute at worst, within a second for up to 512 servers);
//! - the neighbours (`RTM_GETNEIGH`, one dump a second, so a gateway shared by many servers
//!   costs one entry): only REACHABLE, STALE, DELAY and PERMANENT entries; a next hop the
//!   kernel has not resolved yet is left out and looked for again the next second (the
//!   userspace resolver's own query to that server makes the kernel resolve it);
//! - our MAC on each XDP interface (`RTM_GETLINK`).
//!
//! Only a route out of one of our XDP interfaces is written (the kernel redirects to it or
//! sends back out with `XDP_TX`). An entry is written when it changes, and again before
//! half its life ([`HOP_LIFE_NS`]) has passed; one whose server left the zone map, whose
//! route no longer leaves an XDP interface or whose neighbour is gone is removed. So a
//! neighbour's new MAC is followed within a second, a route change within a second for up
//! to [`ROUTES_PER_TICK`] servers (within N/512 seconds beyond), and an entry the daemon no
//! longer refreshes (stopped) stops being used within [`HOP_LIFE_NS`].
//!
//! Periodic re-resolution rather than rtnetlink notifications: notifications would follow a
//! change sooner, but a lost one (the socket's buffer overrun under a routing storm) leaves
//! an entry wrong until something else changes, and a route change notification does not
//! say which of thousands of servers it moves without asking each again anyway; a periodic
//! pass is bounded, needs no resynchronisation, and a second is well inside the time a
//! resolver takes to notice a dead path (`upstream_timeout`).
//!
//! Glue addresses the kernel learns from a referral it follows are in the zone map, so they
//! get their entries at the next pass: until then (about a second) their queries find no
//! next hop and that referral is followed in userspace (`pass_kit_no_hop`).

use std::collections::{HashMap, HashSet};
use std::io;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use xdns_bpf::kit::{KitHop, KitMaps};
use xdns_bpf::route::{Neigh, Route};

/// How often the table is refreshed.
pub const TICK: Duration = Duration::from_secs(1);
/// Routes asked of the kernel per refresh, at most.
pub const ROUTES_PER_TICK: usize = 512;
/// How long the kernel uses an entry after it was written (the writer rewrites it every
/// half life while it holds).
pub const HOP_LIFE_NS: u64 = 30_000_000_000;

/// What the writer asks the kernel: rtnetlink ([`Kernel`]) or a fake (tests).
pub trait Netlink {
    /// The route to `addr`; `None`: none usable.
    fn route(&mut self, addr: IpAddr) -> io::Result<Option<Route>>;
    /// The usable neighbour entries.
    fn neighbours(&mut self) -> io::Result<Vec<Neigh>>;
    /// Interface `ifindex`'s MAC.
    fn link_mac(&mut self, ifindex: u32) -> io::Result<Option<[u8; 6]>>;
}

/// The host's own tables, over rtnetlink.
pub struct Kernel;

impl Netlink for Kernel {
    fn route(&mut self, addr: IpAddr) -> io::Result<Option<Route>> {
        xdns_bpf::route::route_to(addr)
    }
    fn neighbours(&mut self) -> io::Result<Vec<Neigh>> {
        xdns_bpf::route::neighbours()
    }
    fn link_mac(&mut self, ifindex: u32) -> io::Result<Option<[u8; 6]>> {
        xdns_bpf::iface::link_mac(ifindex)
    }
}

/// Where the writer writes: `xdns_kit_hops` ([`KitMaps`]) or a map in memory (tests).
pub trait HopMap {
    fn set_hop(&self, addr: IpAddr, h: &KitHop) -> anyhow::Result<()>;
    fn remove_hop(&self, addr: IpAddr) -> anyhow::Result<()>;
}

impl HopMap for KitMaps {
    fn set_hop(&self, addr: IpAddr, h: &KitHop) -> anyhow::Result<()> {
        KitMaps::set_hop(self, addr, h)
    }
    fn remove_hop(&self, addr: IpAddr) -> anyhow::Result<()> {
        KitMaps::remove_hop(self, addr)
    }
}

/// A server's route as last asked: (the route, the refresh that asked).
struct Asked {
    route: Option<Route>,
    at: u64,
}

/// What one refresh did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Refresh {
    pub routes_asked: usize,
    pub written: usize,
    pub removed: usize,
    /// Servers whose route leaves an XDP interface but whose next hop has no usable
    /// neighbour entry yet.
    pub unresolved: usize,
}

/// Keeps `xdns_kit_hops` equal to the next hops of the zone map's servers (see the module doc).
pub struct HopWriter {
    xdp: HashSet<u32>,
    routes: HashMap<IpAddr, Asked>,
    written: HashMap<IpAddr, KitHop>,
    pass: u64,
}

impl HopWriter {
    /// A writer for the XDP interfaces `xdp` (their indexes).
    pub fn new(xdp: impl IntoIterator<Item = u32>) -> Self {
        Self { xdp: xdp.into_iter().collect(), routes: HashMap::new(), written: HashMap::new(), pass: 0 }
    }

    /// Entries written now.
    pub fn len(&self) -> usize {
        self.written.len()
    }

    /// One pass: make `map` hold the next hops of `servers` at `now_ns` (CLOCK_MONOTONIC).
    pub fn refresh(&mut self, nl: &mut dyn Netlink, map: &dyn HopMap, servers: &[IpAddr], now_ns: u64) -> Refresh {
        let mut r = Refresh::default();
        self.pass += 1;
        let want: HashSet<IpAddr> = servers.iter().copied().collect();
        self.routes.retain(|a, _| want.contains(a));
        // the routes to ask: new servers first, then those asked longest ago
        let mut ask: Vec<(u64, IpAddr)> = want.iter().map(|a| (self.routes.get(a).map_or(0, |x| x.at), *a)).collect();
        ask.sort_unstable();
        for (_, a) in ask.into_iter().take(ROUTES_PER_TICK) {
            r.routes_asked += 1;
            match nl.route(a) {
                Ok(route) => {
                    self.routes.insert(a, Asked { route, at: self.pass });
                }
                Err(e) => tracing::debug!(server = %a, error = %e, "kernel iteration: asking the route to a server"),
            }
        }
        let neigh: HashMap<(u32, IpAddr), [u8; 6]> = match nl.neighbours() {
            Ok(n) => n.into_iter().map(|n| ((n.ifindex, n.addr), n.mac)).collect(),
            Err(e) => {
                // nothing known this time: the entries written stay until the next pass
                tracing::debug!(error = %e, "kernel iteration: reading the neighbour table");
                return r;
            }
        };
        let mut macs: HashMap<u32, Option<[u8; 6]>> = HashMap::new();
        let mut desired: HashMap<IpAddr, KitHop> = HashMap::new();
        for (a, asked) in &self.routes {
            let Some(route) = asked.route.filter(|rt| self.xdp.contains(&rt.oif)) else { continue };
            let smac = *macs.entry(route.oif).or_insert_with(|| nl.link_mac(route.oif).ok().flatten());
            let Some(smac) = smac else { continue };
            let Some(dmac) = neigh.get(&(route.oif, route.gateway.unwrap_or(*a))) else {
                r.unresolved += 1;
                continue;
            };
            desired.insert(*a, KitHop { ifindex: route.oif, smac, dmac: *dmac, expires_ns: now_ns.saturating_add(HOP_LIFE_NS) });
        }
        let gone: Vec<IpAddr> = self.written.keys().filter(|a| !desired.contains_key(a)).copied().collect();
        for a in gone {
            match map.remove_hop(a) {
                Ok(()) => {
                    self.written.remove(&a);
                    r.removed += 1;
                }
                Err(e) => tracing::debug!(server = %a, error = %e, "kernel iteration: removing a next hop"),
            }
        }
        for (a, h) in desired {
            let fresh = self.written.get(&a).is_some_and(|w| {
                (w.ifindex, w.smac, w.dmac) == (h.ifindex, h.smac, h.dmac) && w.expires_ns > now_ns.saturating_add(HOP_LIFE_NS / 2)
            });
            if fresh {
                continue;
            }
            match map.set_hop(a, &h) {
                Ok(()) => {
                    self.written.insert(a, h);
                    r.written += 1;
                }
                Err(e) => tracing::debug!(server = %a, error = %e, "kernel iteration: writing a next hop"),
            }
        }
        r
    }
}

/// Routes asked, entries written and removed, since the start (the `kit` stats group).
pub static ROUTES_ASKED: AtomicU64 = AtomicU64::new(0);
pub static WRITTEN: AtomicU64 = AtomicU64::new(0);
pub static REMOVED: AtomicU64 = AtomicU64::new(0);
/// Entries the table holds now, and servers whose next hop is not resolved yet (gauges).
pub static HELD: AtomicU64 = AtomicU64::new(0);
pub static UNRESOLVED: AtomicU64 = AtomicU64::new(0);

/// Start the writer on a thread of its own: every [`TICK`] until `stop` is set.
pub fn spawn(kit: std::sync::Arc<KitMaps>, interfaces: &[String], stop: std::sync::Arc<std::sync::atomic::AtomicBool>) -> anyhow::Result<std::thread::JoinHandle<()>> {
    let mut xdp = Vec::new();
    for i in interfaces {
        match xdns_bpf::iface::ifindex(i) {
            Ok(x) => xdp.push(x),
            Err(e) => tracing::warn!(interface = %i, error = %e, "kernel iteration: no next hops through this interface"),
        }
    }
    let t = std::thread::Builder::new().name("xdns-kit-hops".into()).spawn(move || {
        let mut w = HopWriter::new(xdp);
        let mut nl = Kernel;
        while !stop.load(Relaxed) {
            let servers = kit.zone_servers().unwrap_or_default();
            let r = w.refresh(&mut nl, &*kit, &servers, crate::kit::monotonic_ns());
            ROUTES_ASKED.fetch_add(r.routes_asked as u64, Relaxed);
            WRITTEN.fetch_add(r.written as u64, Relaxed);
            REMOVED.fetch_add(r.removed as u64, Relaxed);
            HELD.store(w.len() as u64, Relaxed);
            UNRESOLVED.store(r.unresolved as u64, Relaxed);
            // sleep a tick, looking at `stop` every 100 ms
            for _ in 0..10 {
                if stop.load(Relaxed) {
                    break;
                }
                std::thread::sleep(TICK / 10);
            }
        }
    })?;
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    #[derive(Default)]
    struct Fake {
        routes: HashMap<IpAddr, Route>,
        neigh: Vec<Neigh>,
        asked: usize,
    }

    impl Netlink for Fake {
        fn route(&mut self, addr: IpAddr) -> io::Result<Option<Route>> {
            self.asked += 1;
            Ok(self.routes.get(&addr).copied())
        }
        fn neighbours(&mut self) -> io::Result<Vec<Neigh>> {
            Ok(self.neigh.clone())
        }
        fn link_mac(&mut self, ifindex: u32) -> io::Result<Option<[u8; 6]>> {
            Ok(Some([2, 0, 0, 0, 0, ifindex as u8]))
        }
    }

    #[derive(Default)]
    struct Mem(RefCell<HashMap<IpAddr, KitHop>>);

    impl HopMap for Mem {
        fn set_hop(&self, addr: IpAddr, h: &KitHop) -> anyhow::Result<()> {
            self.0.borrow_mut().insert(addr, *h);
            Ok(())
        }
        fn remove_hop(&self, addr: IpAddr) -> anyhow::Result<()> {
            self.0.borrow_mut().remove(&addr);
            Ok(())
        }
    }

    fn a(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    const GW: [u8; 6] = [2, 0, 0, 0, 0, 0xfe];

    #[test]
    fn servers_get_the_gateway_or_their_own_mac_through_xdp_interfaces_only() {
        let mut nl = Fake::default();
        nl.routes.insert(a("198.18.9.1"), Route { oif: 3, gateway: Some(a("198.18.0.254")) });
        nl.routes.insert(a("198.18.0.7"), Route { oif: 3, gateway: None });
        nl.routes.insert(a("2001:db8:9::1"), Route { oif: 3, gateway: Some(a("fe80::1")) });
        nl.routes.insert(a("198.18.8.1"), Route { oif: 4, gateway: None }); // not an XDP interface
        nl.neigh = vec![
            Neigh { ifindex: 3, addr: a("198.18.0.254"), mac: GW },
            Neigh { ifindex: 3, addr: a("198.18.0.7"), mac: [2, 0, 0, 0, 0, 7] },
            Neigh { ifindex: 3, addr: a("fe80::1"), mac: GW },
            Neigh { ifindex: 4, addr: a("198.18.8.1"), mac: [2, 0, 0, 0, 0, 8] },
        ];
        let map = Mem::default();
        let mut w = HopWriter::new([3]);
        let servers = [a("198.18.9.1"), a("198.18.0.7"), a("2001:db8:9::1"), a("198.18.8.1"), a("203.0.113.1")];
        let r = w.refresh(&mut nl, &map, &servers, 1000);
        assert_eq!((r.routes_asked, r.written, r.removed, r.unresolved), (5, 3, 0, 0));
        let m = map.0.borrow();
        let me = [2, 0, 0, 0, 0, 3];
        assert_eq!(m[&a("198.18.9.1")], KitHop { ifindex: 3, smac: me, dmac: GW, expires_ns: 1000 + HOP_LIFE_NS }, "through the gateway");
        assert_eq!(m[&a("198.18.0.7")].dmac, [2, 0, 0, 0, 0, 7], "on-link: the server's own MAC");
        assert_eq!(m[&a("2001:db8:9::1")].dmac, GW, "IPv6, a link-local gateway");
        assert!(!m.contains_key(&a("198.18.8.1")), "not out of an XDP interface");
        assert!(!m.contains_key(&a("203.0.113.1")), "no route");
    }

    #[test]
    fn a_missing_neighbour_is_retried_and_changes_are_followed() {
        let mut nl = Fake::default();
        nl.routes.insert(a("198.18.9.1"), Route { oif: 3, gateway: Some(a("198.18.0.254")) });
        let map = Mem::default();
        let mut w = HopWriter::new([3]);
        let s = [a("198.18.9.1")];
        let r = w.refresh(&mut nl, &map, &s, 0);
        assert_eq!((r.written, r.unresolved), (0, 1), "the gateway not resolved yet");
        nl.neigh = vec![Neigh { ifindex: 3, addr: a("198.18.0.254"), mac: GW }];
        assert_eq!(w.refresh(&mut nl, &map, &s, 1).written, 1, "resolved since: written at the next pass");
        assert_eq!(w.refresh(&mut nl, &map, &s, 2).written, 0, "unchanged: not written again");
        // the gateway's MAC changes: followed at the next pass
        nl.neigh[0].mac = [2, 0, 0, 0, 0, 0xfd];
        assert_eq!(w.refresh(&mut nl, &map, &s, 3).written, 1);
        assert_eq!(map.0.borrow()[&s[0]].dmac, [2, 0, 0, 0, 0, 0xfd]);
        // the route moves to another gateway
        nl.routes.insert(s[0], Route { oif: 3, gateway: Some(a("198.18.0.253")) });
        nl.neigh.push(Neigh { ifindex: 3, addr: a("198.18.0.253"), mac: [2, 0, 0, 0, 0, 0xfc] });
        w.refresh(&mut nl, &map, &s, 4);
        assert_eq!(map.0.borrow()[&s[0]].dmac, [2, 0, 0, 0, 0, 0xfc]);
        // rewritten before half its life has passed
        assert_eq!(w.refresh(&mut nl, &map, &s, 4 + HOP_LIFE_NS / 2).written, 1);
        // the neighbour goes: removed; the server leaves the zone map: removed
        nl.neigh.clear();
        assert_eq!(w.refresh(&mut nl, &map, &s, 5 + HOP_LIFE_NS / 2).removed, 1);
        assert!(map.0.borrow().is_empty());
        nl.neigh.push(Neigh { ifindex: 3, addr: a("198.18.0.253"), mac: GW });
        w.refresh(&mut nl, &map, &s, 6 + HOP_LIFE_NS / 2);
        assert_eq!(map.0.borrow().len(), 1);
        assert_eq!(w.refresh(&mut nl, &map, &[], 7 + HOP_LIFE_NS / 2).removed, 1);
        assert!(map.0.borrow().is_empty() && w.len() == 0);
    }

    #[test]
    fn route_lookups_per_pass_are_bounded_and_cycle_through_every_server() {
        let mut nl = Fake::default();
        let servers: Vec<IpAddr> = (0..2000u32).map(|i| IpAddr::from(std::net::Ipv4Addr::from(0xc612_0000 + i))).collect();
        for s in &servers {
            nl.routes.insert(*s, Route { oif: 3, gateway: Some(a("198.18.255.254")) });
        }
        nl.neigh = vec![Neigh { ifindex: 3, addr: a("198.18.255.254"), mac: GW }];
        let map = Mem::default();
        let mut w = HopWriter::new([3]);
        let mut total = 0;
        for pass in 0..4u64 {
            let before = nl.asked;
            w.refresh(&mut nl, &map, &servers, pass);
            assert!(nl.asked - before <= ROUTES_PER_TICK, "pass {pass}: {} routes asked", nl.asked - before);
            total += nl.asked - before;
        }
        assert_eq!(total, 4 * ROUTES_PER_TICK, "the budget, no more");
        assert_eq!(map.0.borrow().len(), 2000, "every server asked within four passes (2000 / 512)");
        // the next passes ask the oldest again: a moved route is followed within a cycle
        for s in &servers {
            nl.routes.insert(*s, Route { oif: 3, gateway: None });
            nl.neigh.push(Neigh { ifindex: 3, addr: *s, mac: [2, 0, 0, 0, 0, 1] });
        }
        for pass in 4..8u64 {
            w.refresh(&mut nl, &map, &servers, pass);
        }
        assert!(map.0.borrow().values().all(|h| h.dmac == [2, 0, 0, 0, 0, 1]), "every route asked again within four passes");
    }
}
