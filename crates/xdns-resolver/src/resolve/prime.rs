//! Root priming (RFC 8109): the root set in use (the hints, or the root servers' own NS set
//! and addresses), asked for before the first resolution and again when its TTL runs out.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use tokio::time::Instant;
use xdns_wire::name::to_presentation;

use super::{Ctx, Resolver, RootSet, NS, RCODE_NOERROR};
use crate::msg::{rtype, Reply};
use crate::store::{lock, Addrs, Deleg};

/// Shortest life of a primed root NS set (seconds): a tiny TTL does not make every resolution
/// prime again.
const PRIME_MIN_TTL: u32 = 10;
/// After a failed priming, the hints are used this long before priming is tried again
/// (seconds).
const PRIME_RETRY: u64 = 30;

/// Root priming state (RFC 8109).
#[derive(Debug)]
pub(super) struct Priming {
    /// Ask the root servers for `. NS` at or after this time (`u64::MAX`: never).
    due_ns: u64,
    /// A priming has finished (well or not): later ones run in the background while
    /// questions go on with the root set in use.
    settled: bool,
    /// The root set in use came from priming (else: the hints).
    primed: bool,
}

impl Priming {
    /// Due at once when `enabled` (`prime_root` and no forwarders), else never.
    pub(super) fn new(enabled: bool) -> Self {
        Priming {
            due_ns: if enabled { 0 } else { u64::MAX },
            settled: false,
            primed: false,
        }
    }
}

impl Resolver {
    /// Makes `servers` (NS name, addresses) the root set: the root cut and those addresses are
    /// pinned (never expire, never replaced by referral glue, kept by [`Resolver::flush`]);
    /// the previous root set's addresses go.
    pub(super) fn install_root(&self, servers: &[(Vec<u8>, Vec<IpAddr>)]) {
        let ns: Vec<Vec<u8>> = servers.iter().map(|(n, _)| n.clone()).collect();
        lock(&self.infra.zones).insert(
            vec![0],
            Deleg {
                ns,
                expires_ns: u64::MAX,
            },
        );
        let mut addrs = lock(&self.infra.addrs);
        addrs.retain(|_, a| a.expires_ns != u64::MAX);
        for (n, a) in servers {
            addrs.insert(
                n.clone(),
                Addrs {
                    ips: a.clone(),
                    expires_ns: u64::MAX,
                },
            );
        }
        drop(addrs);
        self.infra.changed();
    }

    /// The root servers in use (NS name, addresses): the hints, or the primed set.
    pub fn root_servers(&self) -> RootSet {
        let ns = lock(&self.infra.zones)
            .get(&[0u8][..])
            .map(|d| d.ns.clone())
            .unwrap_or_default();
        let addrs = lock(&self.infra.addrs);
        ns.into_iter()
            .map(|n| {
                let ips = addrs.get(&n).map(|a| a.ips.clone()).unwrap_or_default();
                (n, ips)
            })
            .collect()
    }

    /// True if the root set in use came from priming (false: the hints).
    pub fn root_primed(&self) -> bool {
        lock(&self.priming).primed
    }

    /// Primes now (RFC 8109): asks the root servers in use, then any other hint address, for
    /// `. NS`, and makes the NS set of the first authoritative answer, with the addresses of
    /// those names from the same answer, the root set until the smallest of their TTLs runs
    /// out (then the next question primes again, in the background). When no server gives
    /// such an answer, the hints are used and priming is tried again after `PRIME_RETRY`
    /// seconds. Logs one line either way; returns true on success.
    pub async fn prime(self: &Arc<Self>) -> bool {
        let _running = self.priming_lock.lock().await;
        self.prime_locked().await
    }

    /// Primes when it is due (with `prime_root`: at the first call, then when the root set's
    /// TTL has run out): the first time, the caller waits for it (one priming for all the
    /// questions waiting); later, it runs in the background. Every resolution calls it; the
    /// daemon also calls it at start.
    pub async fn prime_when_due(self: &Arc<Self>) {
        let (due, settled) = {
            let p = lock(&self.priming);
            (p.due_ns <= self.now_ns(), p.settled)
        };
        if !due {
            return;
        }
        if !settled {
            let _running = self.priming_lock.lock().await;
            if lock(&self.priming).due_ns <= self.now_ns() {
                self.prime_locked().await;
            }
            return;
        }
        if self.repriming.swap(true, Relaxed) {
            return;
        }
        let this = self.clone();
        tokio::spawn(async move {
            {
                let _running = this.priming_lock.lock().await;
                if lock(&this.priming).due_ns <= this.now_ns() {
                    this.prime_locked().await;
                }
            }
            this.repriming.store(false, Relaxed);
        });
    }

    /// One priming (the caller holds `priming_lock`).
    async fn prime_locked(&self) -> bool {
        let mut ctx = Ctx {
            queries: 0,
            glueless: 0,
            depth: 0,
            deadline: Instant::now() + self.cfg.load().resolve_timeout,
        };
        let root = Deleg {
            ns: self.root_servers().into_iter().map(|(n, _)| n).collect(),
            expires_ns: u64::MAX,
        };
        let mut servers = self.known_addrs(&root, &[]);
        for ip in self.hints.servers.iter().flat_map(|(_, a)| a) {
            let s = SocketAddr::new(*ip, self.cfg.load().upstream_port);
            if self.family_ok(ip) && !servers.contains(&s) {
                servers.push(s);
            }
        }
        let mut why = String::from("no root server address");
        let mut found = None;
        while !servers.is_empty() {
            match self.ask(&mut ctx, &servers, Some(&[0]), &[0], rtype::NS, false).await {
                Ok((server, reply)) => match root_set(&reply, |ip| self.family_ok(ip)) {
                    Some(set) => {
                        found = Some((server, set));
                        break;
                    }
                    None => {
                        why = format!("{server} gave no authoritative root NS set with addresses");
                        servers.retain(|s| *s != server);
                    }
                },
                Err(e) => {
                    why = e.to_string();
                    break;
                }
            }
        }
        let now = self.now_ns();
        let mut p = lock(&self.priming);
        p.settled = true;
        match found {
            Some((server, (set, ttl))) => {
                let ttl = ttl.min(self.cfg.load().max_ttl).max(PRIME_MIN_TTL);
                self.install_root(&set);
                p.due_ns = now + u64::from(ttl) * NS;
                p.primed = true;
                self.counters.primings.fetch_add(1, Relaxed);
                let servers: Vec<String> = set
                    .iter()
                    .map(|(n, a)| {
                        let a: Vec<String> = a.iter().map(IpAddr::to_string).collect();
                        format!("{} {}", to_presentation(n), a.join(" "))
                    })
                    .collect();
                tracing::info!(
                    %server,
                    ttl,
                    "root priming: {} root servers: {}",
                    set.len(),
                    servers.join(", ")
                );
                true
            }
            None => {
                self.install_root(&self.hints.servers);
                p.due_ns = now + PRIME_RETRY * NS;
                p.primed = false;
                self.counters.priming_failures.fetch_add(1, Relaxed);
                tracing::warn!(
                    "root priming failed ({why}): using the root hints, next try in {PRIME_RETRY} s"
                );
                false
            }
        }
    }
}

/// The root set of a priming reply (RFC 8109 §3): the NS names of `.` in the answer of an
/// authoritative NOERROR reply, each with the A/AAAA records of that name from the additional
/// section (addresses of other names are ignored), and the smallest TTL of those records.
/// `None` when there is no such NS set or none of its names has an address `usable` accepts.
fn root_set(reply: &Reply, usable: impl Fn(&IpAddr) -> bool) -> Option<(RootSet, u32)> {
    if reply.rcode() != RCODE_NOERROR || !reply.authoritative() {
        return None;
    }
    let mut ttl = u32::MAX;
    let mut set: RootSet = Vec::new();
    for r in reply
        .answer
        .iter()
        .filter(|r| r.rtype == rtype::NS && r.owner == [0])
    {
        if let Some(t) = r.target() {
            ttl = ttl.min(r.ttl);
            if !set.iter().any(|(n, _)| *n == t) {
                set.push((t, Vec::new()));
            }
        }
    }
    for r in &reply.additional {
        let ip = match (r.rtype, r.rdata.len()) {
            (rtype::A, 4) => IpAddr::from(<[u8; 4]>::try_from(&r.rdata[..]).expect("4 bytes")),
            (rtype::AAAA, 16) => {
                IpAddr::from(<[u8; 16]>::try_from(&r.rdata[..]).expect("16 bytes"))
            }
            _ => continue,
        };
        if let Some((_, ips)) = set.iter_mut().find(|(n, _)| *n == r.owner) {
            if !ips.contains(&ip) {
                ips.push(ip);
                ttl = ttl.min(r.ttl);
            }
        }
    }
    set.iter()
        .any(|(_, ips)| ips.iter().any(&usable))
        .then_some((set, ttl))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::msg::Rr;

    use crate::resolve::classify::tests::{n, rr};

    /// Priming answers: only an authoritative NOERROR with NS at `.` counts; only addresses of
    /// those NS names are kept; the smallest TTL of what is kept is the set's life.
    #[test]
    fn root_set_of_a_priming_reply() {
        let a = |o: &str, ip: u8, ttl: u32| Rr {
            ttl,
            ..rr(o, rtype::A, vec![198, 18, 0, ip])
        };
        let good = Reply {
            flags: 0x8400,
            answer: vec![
                rr(".", rtype::NS, n("A.root.")),
                rr(".", rtype::NS, n("b.root.")),
                rr("x.", rtype::NS, n("c.root.")),
            ],
            additional: vec![
                a("a.root.", 1, 500),
                a("c.root.", 3, 5),
                a("b.root.", 2, 400),
            ],
            ..Reply::default()
        };
        let (set, ttl) = root_set(&good, |_| true).unwrap();
        assert_eq!(
            set,
            vec![
                (n("a.root."), vec![IpAddr::from([198, 18, 0, 1])]),
                (n("b.root."), vec![IpAddr::from([198, 18, 0, 2])]),
            ]
        );
        assert_eq!(ttl, 300, "NS TTL 300 < glue 400");
        assert!(
            root_set(&good, |ip| ip.is_ipv6()).is_none(),
            "no usable address"
        );
        let not_aa = Reply {
            flags: 0x8000,
            ..good.clone()
        };
        assert!(root_set(&not_aa, |_| true).is_none());
        let nx = Reply {
            flags: 0x8403,
            ..good.clone()
        };
        assert!(root_set(&nx, |_| true).is_none());
        let no_glue = Reply {
            additional: vec![a("c.root.", 3, 5)],
            ..good
        };
        assert!(root_set(&no_glue, |_| true).is_none());
    }
}
