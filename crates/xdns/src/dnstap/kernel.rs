//! dnstap from XDP: the kernel answers a telemetry rule selects (its 1 in N), while
//! `[dnstap] xdp = true`, come as events through the ring buffer `xdns_tel_events`
//! (`bpf/telemetry.h`, [`xdns_bpf::telemetry::TelEvent`]: the query as received, the answer
//! as sent, both ends, the receive and transmit times). One thread ([`Reader`]) reads them in
//! batches and logs each as a query and response pair to the sink in use ([`super::log`]:
//! the same bounded queue as userspace's messages, drops counted there), with the types
//! userspace uses for the same role: `AUTH_QUERY`/`AUTH_RESPONSE` for the kernel's
//! authoritative answers, `CLIENT_QUERY`/`CLIENT_RESPONSE` for its answers from the
//! resolver's cache. The kernel's times (`CLOCK_MONOTONIC`) are turned into wall-clock time
//! with the offset between the two clocks read once per batch.
//!
//! The kernel never waits for the reader: a full ring drops the event (counted by the kernel,
//! `telemetry.dnstap_xdp_ring_full`), the answer leaves all the same.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use xdns_bpf::telemetry::{TelEvent, TelemetryMaps, KERNEL_CACHE};

use super::{Kind, Message, Proto};

/// Records read from the ring buffer (events logged, or offered to a full queue).
pub static READ: AtomicU64 = AtomicU64::new(0);
/// Records that were not events (never, unless the kernel and userspace disagree).
pub static MALFORMED: AtomicU64 = AtomicU64::new(0);

/// `CLOCK_REALTIME - CLOCK_MONOTONIC`, ns: a kernel time plus this is wall-clock time.
pub fn wall_offset() -> i128 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid timespec to write; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    let mono = i128::from(ts.tv_sec) * 1_000_000_000 + i128::from(ts.tv_nsec);
    let real = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as i128);
    real - mono
}

/// The wall-clock time of kernel time `ns` (`CLOCK_MONOTONIC`), given [`wall_offset`].
pub fn wall(ns: u64, offset: i128) -> SystemTime {
    let t = i128::from(ns) + offset;
    SystemTime::UNIX_EPOCH + Duration::from_nanos(u64::try_from(t).unwrap_or(0))
}

/// The dnstap query and response of an event: `(query, response)`.
pub fn messages(e: &TelEvent, offset: i128) -> (Message<'_>, Message<'_>) {
    let (query, response) = match e.path {
        KERNEL_CACHE => (Kind::ClientQuery, Kind::ClientResponse),
        _ => (Kind::AuthQuery, Kind::AuthResponse),
    };
    let rx = wall(e.rx_ns, offset);
    let q = Message { kind: query, proto: Proto::Udp, query_addr: Some(e.client), response_addr: Some(e.server), wire: &e.query, time: rx, query_time: None };
    let r = Message { kind: response, wire: &e.response, time: wall(e.tx_ns, offset), query_time: Some(rx), ..q };
    (q, r)
}

/// Log one ring buffer record (`offset`: [`wall_offset`]).
fn log_record(rec: &[u8], offset: i128) {
    READ.fetch_add(1, Relaxed);
    let Some(e) = TelEvent::parse(rec) else {
        MALFORMED.fetch_add(1, Relaxed);
        return;
    };
    let (q, r) = messages(&e, offset);
    super::log(&q);
    super::log(&r);
}

/// The thread reading the kernel's events; dropping it stops the thread.
pub struct Reader {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Reader {
    /// Start reading `maps`' ring buffer.
    pub fn start(maps: Arc<TelemetryMaps>) -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let thread = std::thread::Builder::new().name("xdns-dnstap-xdp".into()).spawn(move || {
            xdns_bpf::threads::no_caps_after_switch(); // it needs none
            // the clocks' offset, read again after each batch (an NTP step moves it)
            let offset = std::cell::Cell::new(wall_offset());
            let r = maps.read_events(Duration::from_millis(200), &stop2, |rec| log_record(rec, offset.get()), || offset.set(wall_offset()));
            if let Err(e) = r {
                tracing::error!("dnstap from XDP: reading the kernel's events stopped: {e:#}");
            }
        })?;
        Ok(Self { stop, thread: Some(thread) })
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        self.stop.store(true, Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An authoritative event becomes AUTH_QUERY then AUTH_RESPONSE, a cache one
    /// CLIENT_QUERY then CLIENT_RESPONSE; both with the client as query address, ours as
    /// response address, UDP, the query's time as received and the response's as sent
    /// (the kernel's clock moved by the offset), the response carrying the query's time.
    #[test]
    fn events_become_query_and_response_pairs() {
        let mut e = TelEvent {
            rx_ns: 5_000_000_000,
            tx_ns: 5_000_012_345,
            client: "198.18.0.2:40000".parse().unwrap(),
            server: "198.18.0.1:53".parse().unwrap(),
            path: xdns_bpf::telemetry::KERNEL_AUTH,
            vlan: 0,
            query: vec![1, 2, 3],
            response: vec![4, 5, 6, 7],
        };
        let off = 1_700_000_000_000_000_000i128;
        let (q, r) = messages(&e, off);
        assert_eq!((q.kind, r.kind), (Kind::AuthQuery, Kind::AuthResponse));
        assert_eq!((q.query_addr, q.response_addr), (Some(e.client), Some(e.server)));
        assert_eq!((r.query_addr, r.response_addr), (Some(e.client), Some(e.server)));
        assert_eq!((q.proto, r.proto), (Proto::Udp, Proto::Udp));
        assert_eq!((q.wire, r.wire), (&[1u8, 2, 3][..], &[4u8, 5, 6, 7][..]));
        let at = |ns: u64| SystemTime::UNIX_EPOCH + Duration::from_nanos(ns);
        assert_eq!(q.time, at(1_700_000_005_000_000_000));
        assert_eq!(r.time, at(1_700_000_005_000_012_345));
        assert_eq!((q.query_time, r.query_time), (None, Some(q.time)));
        e.path = KERNEL_CACHE;
        let (q, r) = messages(&e, off);
        assert_eq!((q.kind, r.kind), (Kind::ClientQuery, Kind::ClientResponse));
    }

    /// The offset turns this moment's monotonic time into about now.
    #[test]
    fn wall_offset_is_realtime_minus_monotonic() {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: as in `wall_offset`.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        let mono = ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64;
        let t = wall(mono, wall_offset());
        let d = SystemTime::now().duration_since(t).unwrap_or_else(|e| e.duration());
        assert!(d < Duration::from_secs(1), "{d:?}");
        assert_eq!(wall(5, -10), SystemTime::UNIX_EPOCH, "before the epoch: the epoch");
    }
}
