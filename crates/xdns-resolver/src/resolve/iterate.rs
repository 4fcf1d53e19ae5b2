//! Iteration (RFC 1034 §5.3.3): one client question becomes a chain of *steps*, one per name
//! of its CNAME chain. A step starts at the longest cut in the zone map (root hints at worst)
//! and follows referrals down, asking the servers [`super::servers`] picks and acting on what
//! [`super::classify`] makes of each reply: referrals and NXDOMAINs are cached (the zone map,
//! the NXDOMAIN cut of RFC 8020), a cut with no known server address (glue expired before its
//! NS records) is dropped and its parent asked, lame servers are excluded. With QNAME
//! minimisation (RFC 9156, relaxed) each server is first asked only for the next label below
//! its zone.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering::Relaxed;

use hashbrown::HashMap;
use xdns_wire::name::to_presentation;

use super::classify::{classify, Class, Step};
use super::handed::First;
use super::{Ctx, Final, ResolveError, Resolver, NS, RCODE_NOERROR, RCODE_NXDOMAIN};
use crate::msg::{rtype, Rr};
use crate::store::{lock, make_room, Addrs, Deleg};

/// Most referrals followed for one name.
const MAX_REFERRALS: usize = 24;
/// Most minimised queries for one name (RFC 9156 §2.3 MAX_MINIMISE_COUNT).
const MAX_MINIMISE: usize = 10;

impl Resolver {
    /// The records answering `qname`/`qtype`, following CNAMEs across zones; `first`, the
    /// reply to the first full-name query already in hand (kernel iteration's).
    pub(super) async fn resolve_records(
        &self,
        ctx: &mut Ctx,
        qname: &[u8],
        qtype: u16,
        mut first: Option<First>,
    ) -> Result<Final, ResolveError> {
        let mut chain: Vec<Rr> = Vec::new();
        let mut name = qname.to_vec();
        for _ in 0..=self.cfg.load().max_cname {
            let step = self.iterate(ctx, &name, qtype, first.take()).await?;
            chain.extend(step.answer);
            match step.next {
                Some(next) if !chain.iter().any(|r| r.owner == next) => name = next,
                Some(_) => return Err(ResolveError::Failed), // CNAME loop
                None => {
                    return Ok(Final {
                        rcode: step.rcode,
                        answer: chain,
                        authority: step.authority,
                    })
                }
            }
        }
        Err(ResolveError::Budget)
    }

    /// One name: from the closest known cut down the referrals to an answer. With `first`,
    /// from its zone, its reply taken as the answer to the full name asked of its server
    /// there (the reply of an exchange made by someone else: kernel iteration).
    async fn iterate(
        &self,
        ctx: &mut Ctx,
        name: &[u8],
        qtype: u16,
        mut first: Option<First>,
    ) -> Result<Step, ResolveError> {
        let now = self.now_ns();
        if let Some((_, until, mut soa)) = self.infra.nx_cut(name, now) {
            self.counters.nxdomain_cut_hits.fetch_add(1, Relaxed);
            soa.ttl = ((until - now) / NS) as u32;
            return Ok(Step {
                rcode: RCODE_NXDOMAIN,
                answer: vec![],
                authority: vec![soa],
                next: None,
            });
        }
        let forwarding = !self.cfg.load().forwarders.is_empty();
        let (mut zone, mut deleg) = if let Some(f) = first.as_ref().filter(|_| !forwarding) {
            let d = lock(&self.infra.zones).get(&f.zone).cloned();
            (
                f.zone.clone(),
                d.unwrap_or(Deleg {
                    ns: vec![],
                    expires_ns: now,
                }),
            )
        } else if forwarding {
            (
                vec![0],
                Deleg {
                    ns: vec![],
                    expires_ns: u64::MAX,
                },
            )
        } else {
            self.infra
                .closest_cut(name, now)
                .ok_or(ResolveError::Failed)?
        };
        let mut excluded: Vec<SocketAddr> = Vec::new();
        // QNAME minimisation (RFC 9156, relaxed): labels of the last minimised name asked in
        // the current zone (0: none yet), and whether to send the full name from now on.
        let minimise = self.cfg.load().qname_minimisation && !forwarding;
        let mut asked_labels = 0usize;
        let mut full = false;
        let mut minimised = 0usize;
        for _ in 0..MAX_REFERRALS + MAX_MINIMISE {
            let handed = first.take().filter(|_| !forwarding);
            let (server, reply) = if let Some(f) = handed {
                ctx.queries += 1;
                (f.server, f.reply)
            } else {
                let servers = if forwarding {
                    self.cfg
                        .load()
                        .forwarders
                        .iter()
                        .copied()
                        .filter(|s| !excluded.contains(s))
                        .collect()
                } else {
                    self.servers_for(ctx, &zone, &deleg, &excluded).await?
                };
                if servers.is_empty() {
                    // No address known for this cut (its glue expired before its NS records, or
                    // was never given): forget the cut and ask the parent again, which refers
                    // with fresh glue.
                    if forwarding || zone == [0] || !excluded.is_empty() {
                        return Err(ResolveError::Failed);
                    }
                    lock(&self.infra.zones).remove(&zone);
                    self.infra.changed();
                    let parent = xdns_wire::name::parent(&zone).unwrap_or(&[0]).to_vec();
                    (zone, deleg) = self
                        .infra
                        .closest_cut(&parent, self.now_ns())
                        .ok_or(ResolveError::Failed)?;
                    continue;
                }
                let name_labels = xdns_wire::name::label_count(name);
                let next_labels = asked_labels.max(xdns_wire::name::label_count(&zone)) + 1;
                if minimised >= MAX_MINIMISE {
                    full = true;
                }
                if minimise && !full && next_labels < name_labels {
                    minimised += 1;
                    // Ask for the next label below the cut only, type A (RFC 9156 §2.1).
                    let qn = suffix_with_labels(name, next_labels);
                    let (server, reply) = self
                        .ask(ctx, &servers, Some(&zone), qn, rtype::A, false)
                        .await?;
                    match classify(&reply, qn, rtype::A, &zone, self.cfg.load().max_cname) {
                        Class::Referral {
                            zone: child,
                            ns,
                            glue,
                        } => {
                            deleg = self.note_referral(&child, &ns, &glue, now);
                            zone = child;
                            excluded.clear();
                            asked_labels = 0;
                        }
                        // The name exists here and is no cut (data, CNAME or an empty
                        // non-terminal): one label more.
                        Class::Answer(_) | Class::NoData(_) => asked_labels = next_labels,
                        // NXDOMAIN above the name, a lame or odd reply: relaxed mode asks the
                        // full name instead (an NXDOMAIN is then proven for the name itself).
                        Class::NxDomain(_) | Class::Lame => {
                            tracing::debug!(%server, zone = %to_presentation(&zone), "minimised query: asking the full name");
                            full = true;
                        }
                    }
                    continue;
                }
                let zone_bound = (!forwarding).then_some(&zone[..]);
                self.ask(ctx, &servers, zone_bound, name, qtype, forwarding)
                    .await?
            };
            match classify(&reply, name, qtype, &zone, self.cfg.load().max_cname) {
                Class::Answer(step) => {
                    if step.rcode == RCODE_NXDOMAIN {
                        if let (Some(last), Some(soa)) =
                            (step.answer.last(), step.authority.first())
                        {
                            if let Some(t) = last.target() {
                                self.note_nxdomain(&t, soa, now);
                            }
                        }
                    }
                    return Ok(step);
                }
                Class::NxDomain(soa) => {
                    if let Some(soa) = &soa {
                        self.note_nxdomain(name, soa, now);
                    }
                    return Ok(Step {
                        rcode: RCODE_NXDOMAIN,
                        answer: vec![],
                        authority: soa.into_iter().collect(),
                        next: None,
                    });
                }
                Class::NoData(soa) => {
                    return Ok(Step {
                        rcode: RCODE_NOERROR,
                        answer: vec![],
                        authority: soa.into_iter().collect(),
                        next: None,
                    });
                }
                Class::Referral {
                    zone: child,
                    ns,
                    glue,
                } if !forwarding => {
                    deleg = self.note_referral(&child, &ns, &glue, now);
                    zone = child;
                    excluded.clear();
                    asked_labels = 0;
                    full = false;
                }
                Class::Referral { .. } | Class::Lame => {
                    tracing::debug!(%server, zone = %to_presentation(&zone), "lame reply");
                    excluded.push(server);
                }
            }
        }
        Err(ResolveError::Budget)
    }

    fn note_nxdomain(&self, name: &[u8], soa: &Rr, now: u64) {
        let ttl = soa
            .soa_negative_ttl()
            .unwrap_or(0)
            .min(self.cfg.load().max_negative_ttl);
        if ttl == 0 {
            return;
        }
        let mut nx = lock(&self.infra.nx);
        make_room(&mut nx, self.cfg.load().infra_entries, |(u, _)| *u <= now);
        nx.insert(name.to_vec(), (now + u64::from(ttl) * NS, soa.clone()));
    }

    /// Caches a referral: the child's NS names and their in-bailiwick glue.
    fn note_referral(&self, child: &[u8], ns: &[Rr], glue: &[Rr], now: u64) -> Deleg {
        let ttl = ns
            .iter()
            .map(|r| r.ttl)
            .min()
            .unwrap_or(0)
            .min(self.cfg.load().max_ttl);
        let deleg = Deleg {
            ns: ns.iter().filter_map(Rr::target).collect(),
            expires_ns: now + u64::from(ttl.max(1)) * NS,
        };
        {
            let mut z = lock(&self.infra.zones);
            make_room(&mut z, self.cfg.load().infra_entries, |d| {
                d.expires_ns <= now
            });
            z.insert(child.to_vec(), deleg.clone());
        }
        self.infra.changed();
        let mut by_name: HashMap<Vec<u8>, Addrs> = HashMap::new();
        for g in glue {
            let ip = match (g.rtype, g.rdata.len()) {
                (rtype::A, 4) => IpAddr::from(<[u8; 4]>::try_from(&g.rdata[..]).expect("4 bytes")),
                (rtype::AAAA, 16) => {
                    IpAddr::from(<[u8; 16]>::try_from(&g.rdata[..]).expect("16 bytes"))
                }
                _ => continue,
            };
            let e = by_name.entry(g.owner.clone()).or_insert(Addrs {
                ips: vec![],
                expires_ns: u64::MAX,
            });
            e.ips.push(ip);
            e.expires_ns = e
                .expires_ns
                .min(now + u64::from(g.ttl.min(self.cfg.load().max_ttl).max(1)) * NS);
        }
        if !by_name.is_empty() {
            let mut a = lock(&self.infra.addrs);
            for (n, v) in by_name {
                // Root hint addresses are never replaced.
                if a.get(&n).is_some_and(|x| x.expires_ns == u64::MAX) {
                    continue;
                }
                make_room(&mut a, self.cfg.load().infra_entries, |x| {
                    x.expires_ns <= now
                });
                a.insert(n, v);
            }
        }
        deleg
    }
}

/// The suffix of `name` with `labels` labels (root not counted).
fn suffix_with_labels(name: &[u8], labels: usize) -> &[u8] {
    let offs: Vec<usize> = xdns_wire::name::suffix_offsets(name).collect();
    let total = offs.len().saturating_sub(1);
    &name[offs[total.saturating_sub(labels)]..]
}
