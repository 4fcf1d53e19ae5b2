//! SOA serial arithmetic (RFC 1982) and the secondary's timers (RFC 1035 §3.3.13).

use std::time::Duration;

/// `a` is greater than `b` in serial arithmetic (RFC 1982 §3.2, SERIAL_BITS = 32). Two
/// serials exactly 2^31 apart are not comparable: neither is greater.
pub fn gt(a: u32, b: u32) -> bool {
    a != b && a.wrapping_sub(b) < 0x8000_0000
}

/// The SOA timers of a zone, as the secondary uses them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timers {
    /// Check the primary this often.
    pub refresh: Duration,
    /// After a failed check, try again this soon.
    pub retry: Duration,
    /// Without a successful check this long, the zone is no longer authoritative: SERVFAIL.
    pub expire: Duration,
}

/// Floor of refresh and retry: a zone asking for 0 s must not make us hammer its primary.
pub const MIN_INTERVAL: Duration = Duration::from_secs(1);

impl Timers {
    /// The timers of SOA RDATA (uncompressed wire form); `None` if it is not SOA RDATA.
    /// Refresh and retry are at least [`MIN_INTERVAL`]; expire at least the refresh (RFC 1912
    /// §2.2 wants it much larger; a smaller one would expire between two good checks).
    pub fn from_soa(rdata: &[u8]) -> Option<Self> {
        let nums = soa_numbers(rdata)?;
        let secs = |v: u32| Duration::from_secs(u64::from(v));
        let refresh = secs(nums[1]).max(MIN_INTERVAL);
        let retry = secs(nums[2]).max(MIN_INTERVAL);
        let expire = secs(nums[3]).max(refresh);
        Some(Self { refresh, retry, expire })
    }
}

/// Serial of SOA RDATA (uncompressed wire form).
pub fn soa_serial(rdata: &[u8]) -> Option<u32> {
    soa_numbers(rdata).map(|n| n[0])
}

/// The five numbers of SOA RDATA: serial, refresh, retry, expire, minimum.
fn soa_numbers(rdata: &[u8]) -> Option<[u32; 5]> {
    let mut pos = 0usize;
    for _ in 0..2 {
        loop {
            let len = *rdata.get(pos)? as usize;
            if len & 0xc0 != 0 {
                return None; // compressed: never in stored RDATA
            }
            pos += 1 + len;
            if len == 0 {
                break;
            }
        }
    }
    let rest = rdata.get(pos..)?;
    if rest.len() != 20 {
        return None;
    }
    let mut n = [0u32; 5];
    for (i, v) in n.iter_mut().enumerate() {
        *v = u32::from_be_bytes(rest[i * 4..i * 4 + 4].try_into().ok()?);
    }
    Some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc1982_table() {
        // (a, b, a > b)
        let rows: &[(u32, u32, bool)] = &[
            (1, 0, true),
            (0, 1, false),
            (5, 5, false),
            (0, u32::MAX, true), // wraps: 0 follows 4294967295
            (u32::MAX, 0, false),
            (0x7fff_ffff, 0, true),
            (0x8000_0000, 0, false), // exactly 2^31 apart: undefined, neither
            (0, 0x8000_0000, false),
            (0x8000_0001, 0, false), // more than 2^31 ahead is behind
            (0, 0x8000_0001, true),
            (2026112701, 2026112700, true),
        ];
        for &(a, b, want) in rows {
            assert_eq!(gt(a, b), want, "gt({a}, {b})");
        }
    }

    fn soa(serial: u32, refresh: u32, retry: u32, expire: u32) -> Vec<u8> {
        let mut v = b"\x02ns\x00\x01h\x00".to_vec();
        for n in [serial, refresh, retry, expire, 60] {
            v.extend_from_slice(&n.to_be_bytes());
        }
        v
    }

    #[test]
    fn timers_from_soa() {
        let t = Timers::from_soa(&soa(7, 3600, 600, 604800)).unwrap();
        assert_eq!(t.refresh, Duration::from_secs(3600));
        assert_eq!(t.retry, Duration::from_secs(600));
        assert_eq!(t.expire, Duration::from_secs(604800));
        assert_eq!(soa_serial(&soa(7, 1, 1, 1)), Some(7));
        // floors: zero intervals become 1 s, expire never below refresh
        let t = Timers::from_soa(&soa(7, 0, 0, 0)).unwrap();
        assert_eq!((t.refresh, t.retry, t.expire), (MIN_INTERVAL, MIN_INTERVAL, MIN_INTERVAL));
        let t = Timers::from_soa(&soa(7, 100, 10, 50)).unwrap();
        assert_eq!(t.expire, Duration::from_secs(100));
        // not SOA RDATA
        assert_eq!(Timers::from_soa(b""), None);
        assert_eq!(Timers::from_soa(&soa(7, 1, 1, 1)[..20]), None);
        assert_eq!(soa_serial(b"\xc0\x0c"), None);
    }
}
