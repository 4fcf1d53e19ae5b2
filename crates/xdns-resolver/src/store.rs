//! Userspace caches: answers (the source of truth; the kernel cache only accelerates), the zone
//! map (delegations), server addresses, NXDOMAIN cuts, failures and server RTTs.
//!
//! Every map is bounded. When a map is full, entries past their (stale) lifetime go first, then
//! arbitrary ones (hash order, so effectively random eviction); this keeps insertion O(1)
//! amortised without an LRU list on the hit path.

use std::hash::{BuildHasher, Hash};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use hashbrown::HashMap;
use xdns_wire::{CacheKey, CachedAnswer};

use crate::msg::Rr;

/// Locks a mutex, ignoring poisoning (the data are caches: a panic mid-update loses nothing
/// that matters).
pub fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// One cached answer with what is needed to serve it stale.
#[derive(Debug)]
pub struct Entry {
    /// The answer as installed in the kernel cache.
    pub answer: Arc<CachedAnswer>,
    /// Answer section records (for rebuilding a stale answer with TTL 30).
    pub answer_rrs: Vec<Rr>,
    /// Authority section records (the SOA of a negative answer).
    pub authority_rrs: Vec<Rr>,
    /// RCODE of the answer.
    pub rcode: u16,
    /// The entry may be served stale (RFC 8767) until this time.
    pub stale_until_ns: u64,
}

const SHARDS: usize = 16;

/// A borrowed [`CacheKey`] for lookups without allocating. Hashes exactly like `CacheKey`
/// (same fields, same order; a `Vec<u8>` hashes as its slice).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KeyRef<'a> {
    /// Lowercased wire name.
    pub qname: &'a [u8],
    /// Type.
    pub qtype: u16,
    /// DO bit.
    pub dnssec_ok: bool,
}

impl hashbrown::Equivalent<CacheKey> for KeyRef<'_> {
    fn equivalent(&self, k: &CacheKey) -> bool {
        self.qname == k.qname.as_slice() && self.qtype == k.qtype && self.dnssec_ok == k.dnssec_ok
    }
}

impl KeyRef<'_> {
    /// The owned key.
    pub fn to_owned_key(&self) -> CacheKey {
        CacheKey {
            qname: self.qname.to_vec(),
            qtype: self.qtype,
            dnssec_ok: self.dnssec_ok,
        }
    }
}

/// The answer cache, sharded by key hash.
pub struct AnswerStore {
    shards: Vec<Mutex<HashMap<CacheKey, Arc<Entry>>>>,
    per_shard: usize,
    hasher: hashbrown::DefaultHashBuilder,
}

impl AnswerStore {
    /// A cache holding at most about `capacity` answers.
    pub fn new(capacity: usize) -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            per_shard: capacity.div_ceil(SHARDS).max(1),
            hasher: hashbrown::DefaultHashBuilder::default(),
        }
    }

    fn shard(&self, key: &CacheKey) -> &Mutex<HashMap<CacheKey, Arc<Entry>>> {
        self.shard_ref(&KeyRef {
            qname: &key.qname,
            qtype: key.qtype,
            dnssec_ok: key.dnssec_ok,
        })
    }

    fn shard_ref(&self, key: &KeyRef<'_>) -> &Mutex<HashMap<CacheKey, Arc<Entry>>> {
        &self.shards[(self.hasher.hash_one(key) as usize) % SHARDS]
    }

    /// The entry for `key`, fresh or stale.
    pub fn get(&self, key: &CacheKey) -> Option<Arc<Entry>> {
        self.get_ref(&KeyRef {
            qname: &key.qname,
            qtype: key.qtype,
            dnssec_ok: key.dnssec_ok,
        })
    }

    /// The entry for a borrowed key, fresh or stale.
    pub fn get_ref(&self, key: &KeyRef<'_>) -> Option<Arc<Entry>> {
        lock(self.shard_ref(key)).get(key).cloned()
    }

    /// Installs `entry` under its key; returns the number of entries evicted to make room.
    pub fn insert(&self, entry: Arc<Entry>, now_ns: u64) -> usize {
        let key = CacheKey {
            qname: entry.answer.qname.clone(),
            qtype: entry.answer.qtype,
            dnssec_ok: entry.answer.dnssec_ok,
        };
        let mut m = lock(self.shard(&key));
        let evicted = make_room(&mut m, self.per_shard, |e| e.stale_until_ns <= now_ns);
        m.insert(key, entry);
        evicted
    }

    /// Removes `key`.
    pub fn remove(&self, key: &CacheKey) {
        lock(self.shard(key)).remove(key);
    }

    /// Removes every entry; returns their keys.
    pub fn clear(&self) -> Vec<CacheKey> {
        let mut keys = Vec::new();
        for s in &self.shards {
            keys.extend(lock(s).drain().map(|(k, _)| k));
        }
        keys
    }

    /// Removes every entry whose key `matches`; returns their keys.
    pub fn remove_where(&self, matches: impl Fn(&CacheKey) -> bool) -> Vec<CacheKey> {
        let mut keys = Vec::new();
        for s in &self.shards {
            lock(s).retain(|k, _| {
                let hit = matches(k);
                if hit {
                    keys.push(k.clone());
                }
                !hit
            });
        }
        keys
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| lock(s).len()).sum()
    }

    /// True if empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Makes room for one insertion in `m` (at most `cap` entries): removes dead entries, then
/// arbitrary ones. Returns how many were removed.
pub fn make_room<K: Hash + Eq, V>(
    m: &mut HashMap<K, V>,
    cap: usize,
    dead: impl Fn(&V) -> bool,
) -> usize {
    if m.len() < cap {
        return 0;
    }
    let before = m.len();
    m.retain(|_, v| !dead(v));
    while m.len() >= cap {
        // Hash order is effectively random: evict a batch so this is not done every insert.
        let n = (cap / 16).max(1).min(m.len());
        let mut left = n;
        m.retain(|_, _| {
            if left > 0 {
                left -= 1;
                false
            } else {
                true
            }
        });
    }
    before - m.len()
}

/// A delegation in the zone map: the NS names of a zone cut.
#[derive(Clone, Debug)]
pub struct Deleg {
    /// NS names, lowercased.
    pub ns: Vec<Vec<u8>>,
    /// When the NS RRset expires (`u64::MAX`: root hints).
    pub expires_ns: u64,
}

/// Addresses of a server name.
#[derive(Clone, Debug, Default)]
pub struct Addrs {
    /// IPv4 and IPv6 addresses.
    pub ips: Vec<IpAddr>,
    /// When they expire.
    pub expires_ns: u64,
}

/// Smoothed RTT and hold-down of one server address.
#[derive(Clone, Copy, Debug)]
pub struct Rtt {
    /// Smoothed RTT in microseconds (RFC 6298 style, alpha 1/8).
    pub srtt_us: u64,
    /// Consecutive timeouts.
    pub timeouts: u32,
    /// Not asked before this time unless nothing else is left.
    pub held_until_ns: u64,
}

/// Everything the iteration learns besides answers.
#[derive(Default)]
pub struct Infra {
    /// Zone cut → its NS names.
    pub zones: Mutex<HashMap<Vec<u8>, Deleg>>,
    /// Server name → addresses.
    pub addrs: Mutex<HashMap<Vec<u8>, Addrs>>,
    /// Name → (NXDOMAIN until, the SOA that proved it, TTL already negative).
    pub nx: Mutex<HashMap<Vec<u8>, (u64, Rr)>>,
    /// (name, type) → SERVFAIL cached until (RFC 9520).
    pub failures: Mutex<HashMap<(Vec<u8>, u16), u64>>,
    /// Server address → RTT state.
    pub rtt: Mutex<HashMap<IpAddr, Rtt>>,
    /// Bumped whenever `zones` or `addrs` change ([`Infra::changed`]): kernel iteration's
    /// zone map writer copies the delegations only then.
    pub generation: std::sync::atomic::AtomicU64,
}

impl Infra {
    /// Notes that `zones` or `addrs` changed.
    pub fn changed(&self) {
        self.generation.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// The longest zone cut at or above `name` that has not expired.
    pub fn closest_cut(&self, name: &[u8], now_ns: u64) -> Option<(Vec<u8>, Deleg)> {
        let zones = lock(&self.zones);
        for p in xdns_wire::name::suffix_offsets(name) {
            if let Some(d) = zones.get(&name[p..]) {
                if d.expires_ns > now_ns {
                    return Some((name[p..].to_vec(), d.clone()));
                }
            }
        }
        None
    }

    /// The NXDOMAIN proof covering `name` (itself or an ancestor, RFC 8020), if any.
    pub fn nx_cut(&self, name: &[u8], now_ns: u64) -> Option<(Vec<u8>, u64, Rr)> {
        let nx = lock(&self.nx);
        if nx.is_empty() {
            return None;
        }
        for p in xdns_wire::name::suffix_offsets(name) {
            if let Some((until, soa)) = nx.get(&name[p..]) {
                if *until > now_ns {
                    return Some((name[p..].to_vec(), *until, soa.clone()));
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn borrowed_keys_find_owned_ones() {
        let store = AnswerStore::new(100);
        for (i, name) in [&b"\x01a\x00"[..], b"\x03www\x07example\x00", b"\x00"]
            .iter()
            .enumerate()
        {
            let answer = Arc::new(CachedAnswer {
                qname: name.to_vec(),
                qtype: i as u16,
                dnssec_ok: i == 1,
                body: Default::default(),
                stored_at_ns: 0,
                expires_at_ns: 1,
                prefetch_at_ns: 1,
            });
            store.insert(
                Arc::new(Entry {
                    answer,
                    answer_rrs: vec![],
                    authority_rrs: vec![],
                    rcode: 0,
                    stale_until_ns: 1,
                }),
                0,
            );
            let k = KeyRef {
                qname: name,
                qtype: i as u16,
                dnssec_ok: i == 1,
            };
            assert!(store.get_ref(&k).is_some(), "{i}");
            assert!(store.get(&k.to_owned_key()).is_some(), "{i}");
            assert!(
                store
                    .get_ref(&KeyRef {
                        dnssec_ok: i != 1,
                        ..k
                    })
                    .is_none(),
                "{i}"
            );
        }
    }

    #[test]
    fn make_room_bounds_the_map() {
        let mut m: HashMap<u32, u32> = HashMap::new();
        for i in 0..1000 {
            make_room(&mut m, 100, |v| *v % 2 == 0);
            m.insert(i, i);
            assert!(m.len() <= 100);
        }
    }
}
