//! `xdns probe`: in-band latency probes (issue 27). Queries carry EDNS option 65050
//! (`crate::telemetry::OPTION`, empty); a server whose telemetry rules select them writes its
//! receive and transmit ns into the option of the answer. Each round trip then splits into
//! server time (transmit − receive, the server's clock) and network time (the rest: wire,
//! both stacks, the prober itself). With `--baseline`, the same probe against a no-op
//! reflector on the same path (`xdns probe --reflect ADDR`) measures what the path and the
//! prober cost without any server work, to subtract from the network time.

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use xdns_bpf::telemetry::{Histogram, OPTION, PROBE_LEN};

/// What one probe run measured.
#[derive(Debug, Default)]
pub struct Run {
    pub sent: u64,
    pub answered: u64,
    /// Answers that carried the server's timestamps.
    pub stamped: u64,
    pub rtt: Histogram,
    pub server: Histogram,
    pub network: Histogram,
}

/// The probe query: ID `id`, RD=0, the question, OPT (payload 1232) with the empty option.
pub fn query(id: u16, qname: &[u8], qtype: u16) -> Vec<u8> {
    let mut m = Vec::with_capacity(64);
    m.extend_from_slice(&id.to_be_bytes());
    m.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0, 1]);
    m.extend_from_slice(qname);
    m.extend_from_slice(&qtype.to_be_bytes());
    m.extend_from_slice(&[0, 1]);
    m.extend_from_slice(&[0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0, 0, 4]);
    m.extend_from_slice(&OPTION.to_be_bytes());
    m.extend_from_slice(&[0, 0]);
    m
}

/// The server's (receive, transmit) ns from an answer's probe option, if it has one with data.
pub fn stamps(answer: &[u8]) -> Option<(u64, u64)> {
    let a = crate::telemetry::asked_answer(answer)?;
    if a.len() != PROBE_LEN {
        return None;
    }
    let rx = u64::from_be_bytes(a[..8].try_into().ok()?);
    let tx = u64::from_be_bytes(a[8..].try_into().ok()?);
    (rx != 0 && tx >= rx).then_some((rx, tx))
}

/// Send `rate` probes a second for `duration` to `server`; answers are awaited up to one
/// second after the last probe.
pub fn run(server: SocketAddr, rate: u32, duration: Duration, qname: &[u8], qtype: u16) -> Result<Run> {
    if rate == 0 {
        bail!("--rate must be at least 1");
    }
    let bind: SocketAddr = if server.is_ipv4() { "0.0.0.0:0".parse()? } else { "[::]:0".parse()? };
    let sock = UdpSocket::bind(bind).context("binding the probe socket")?;
    sock.connect(server).with_context(|| format!("connecting to {server}"))?;
    let interval = Duration::from_secs_f64(1.0 / f64::from(rate));
    let total = (duration.as_secs_f64() * f64::from(rate)).ceil().max(1.0) as u64;
    let mut sent_at: Vec<Option<Instant>> = vec![None; 65536];
    let mut out = Run::default();
    let start = Instant::now();
    let mut next = start;
    let mut buf = [0u8; 4096];
    let mut last_sent = start;
    loop {
        let now = Instant::now();
        while out.sent < total && next <= now {
            let id = (out.sent & 0xffff) as u16;
            let q = query(id, qname, qtype);
            sent_at[usize::from(id)] = Some(Instant::now());
            let _ = sock.send(&q);
            out.sent += 1;
            next += interval;
            last_sent = Instant::now();
        }
        if out.sent >= total && (out.answered >= out.sent || now.duration_since(last_sent) > Duration::from_secs(1)) {
            break;
        }
        let wait = if out.sent < total { next.saturating_duration_since(Instant::now()) } else { Duration::from_millis(50) };
        sock.set_read_timeout(Some(wait.max(Duration::from_micros(50))))?;
        match sock.recv(&mut buf) {
            Ok(n) => {
                let got = Instant::now();
                let a = &buf[..n];
                if n < 12 || a[2] & 0x80 == 0 {
                    continue;
                }
                let id = usize::from(u16::from_be_bytes([a[0], a[1]]));
                let Some(t) = sent_at[id].take() else { continue };
                let rtt = got.duration_since(t).as_nanos() as u64;
                out.answered += 1;
                out.rtt.record(rtt);
                if let Some((rx, tx)) = stamps(a) {
                    out.stamped += 1;
                    out.server.record(tx - rx);
                    out.network.record(rtt.saturating_sub(tx - rx));
                } else {
                    out.network.record(rtt);
                }
            }
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(e) => return Err(e).context("receiving"),
        }
    }
    Ok(out)
}

/// The no-op reflector: every datagram goes back to its sender as it came, QR set. Runs
/// until killed.
pub fn reflect(addr: SocketAddr) -> Result<()> {
    let sock = UdpSocket::bind(addr).with_context(|| format!("binding {addr}"))?;
    eprintln!("xdns probe: reflecting on {}", sock.local_addr()?);
    let mut buf = [0u8; 4096];
    loop {
        let (n, from) = sock.recv_from(&mut buf)?;
        if n >= 3 {
            buf[2] |= 0x80;
        }
        let _ = sock.send_to(&buf[..n], from);
    }
}

fn us(ns: Option<u64>) -> String {
    ns.map_or("-".into(), |v| format!("{:.1}", v as f64 / 1000.0))
}

/// The report: percentiles of round trip, server and network time (µs), and a chart of the
/// round trips.
pub fn report(r: &Run, baseline: Option<&Run>) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let lost = r.sent - r.answered;
    let _ = writeln!(s, "sent {} answered {} lost {} stamped {}", r.sent, r.answered, lost, r.stamped);
    let _ = writeln!(s, "{:<10} {:>10} {:>10} {:>10} {:>10} {:>10}", "µs", "p50", "p90", "p99", "p99.9", "max");
    let row = |s: &mut String, name: &str, h: &Histogram| {
        let q = |p| h.quantile(p);
        let _ = writeln!(s, "{:<10} {:>10} {:>10} {:>10} {:>10} {:>10}", name, us(q(0.5)), us(q(0.9)), us(q(0.99)), us(q(0.999)), us(q(1.0)));
    };
    row(&mut s, "rtt", &r.rtt);
    row(&mut s, "server", &r.server);
    row(&mut s, "network", &r.network);
    if let Some(b) = baseline {
        row(&mut s, "baseline", &b.rtt);
        let q = |h: &Histogram, p| h.quantile(p).unwrap_or(0) as i64;
        let _ = writeln!(
            s,
            "{:<10} {:>10.1} {:>10.1} {:>10.1} {:>10.1}",
            "net-base",
            (q(&r.network, 0.5) - q(&b.rtt, 0.5)) as f64 / 1000.0,
            (q(&r.network, 0.9) - q(&b.rtt, 0.9)) as f64 / 1000.0,
            (q(&r.network, 0.99) - q(&b.rtt, 0.99)) as f64 / 1000.0,
            (q(&r.network, 0.999) - q(&b.rtt, 0.999)) as f64 / 1000.0,
        );
    }
    s.push_str(&chart(&r.rtt, "rtt"));
    if r.stamped > 0 {
        s.push_str(&chart(&r.server, "server"));
    }
    s
}

/// A text histogram: counts by power-of-two-and-a-half bucket, bars scaled to 50 columns.
pub fn chart(h: &Histogram, name: &str) -> String {
    use std::fmt::Write;
    let bounds = xdns_bpf::telemetry::export_bounds();
    let cum = h.cumulative(&bounds);
    let mut rows = Vec::new();
    let mut prev = 0;
    for (b, c) in bounds.iter().zip(&cum) {
        rows.push((*b + 1, c - prev));
        prev = *c;
    }
    let first = rows.iter().position(|r| r.1 > 0);
    let last = rows.iter().rposition(|r| r.1 > 0);
    let mut s = format!("{name} histogram (µs, ≤ bound):\n");
    if let (Some(f), Some(l)) = (first, last) {
        let max = rows[f..=l].iter().map(|r| r.1).max().unwrap_or(1).max(1);
        for (b, n) in &rows[f..=l] {
            let bar = "#".repeat((n * 50).div_ceil(max) as usize);
            let _ = writeln!(s, "{:>10.1} {:>8} {bar}", *b as f64 / 1000.0, n);
        }
    }
    s
}

/// One line of JSON with the run's percentiles (ns), for scripts and tests.
pub fn json(r: &Run, baseline: Option<&Run>) -> String {
    let p = |h: &Histogram| {
        serde_json::json!({
            "count": h.buckets.iter().sum::<u64>(),
            "p50": h.quantile(0.5), "p90": h.quantile(0.9), "p99": h.quantile(0.99), "p999": h.quantile(0.999),
        })
    };
    let mut v = serde_json::json!({
        "sent": r.sent, "answered": r.answered, "stamped": r.stamped,
        "rtt": p(&r.rtt), "server": p(&r.server), "network": p(&r.network),
    });
    if let Some(b) = baseline {
        v["baseline"] = p(&b.rtt);
    }
    v.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_query_round_trips_through_the_reflector_and_the_stamp_reader() {
        let q = query(7, b"\x03www\x07example\x03com\x00", 1);
        let a = crate::telemetry::asked(&q).unwrap();
        assert_eq!((a.qtype, a.probe), (1, Some(0)));
        // the reflector's echo has an empty option: no stamps
        let mut echo = q.clone();
        echo[2] |= 0x80;
        assert_eq!(stamps(&echo), None);
        // a server's answer: the option with its 16 bytes
        let mut ans = echo[..q.len() - 4].to_vec();
        let n = ans.len();
        ans[n - 2..].copy_from_slice(&20u16.to_be_bytes());
        ans.extend_from_slice(&[0xfe, 0x1a, 0, 16]);
        ans.extend_from_slice(&1000u64.to_be_bytes());
        ans.extend_from_slice(&1500u64.to_be_bytes());
        assert_eq!(stamps(&ans), Some((1000, 1500)));
    }

    #[test]
    fn reflector_and_probe_over_loopback() {
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = sock.local_addr().unwrap();
        drop(sock);
        std::thread::spawn(move || reflect(addr));
        std::thread::sleep(Duration::from_millis(100));
        let r = run(addr, 200, Duration::from_millis(500), b"\x01x\x00", 1).unwrap();
        assert_eq!(r.sent, 100);
        assert_eq!(r.answered, 100);
        assert_eq!(r.stamped, 0);
        assert!(r.rtt.quantile(0.5).unwrap() > 0);
        let text = report(&r, Some(&r));
        assert!(text.contains("sent 100 answered 100 lost 0"), "{text}");
        assert!(text.contains("rtt histogram"), "{text}");
    }
}
