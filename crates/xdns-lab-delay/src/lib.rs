//! The logic of `xdns-lab-delay`, the lab's delaying Ethernet relay: which one-way delay a
//! frame gets, and the queues that hold frames until they are due. No I/O here (the socket
//! loop is in `main.rs`), so all of it is tested without root.
//!
//! The relay bridges two interfaces (two veths of a namespace that has no addresses of its
//! own): every frame read on one is written, unchanged, to the other once its delay has
//! passed. A frame's delay is the largest configured delay of its IPv4/IPv6 source and
//! destination addresses (the default for others, and for frames that are not IP: ARP,
//! and so on). Delaying both directions by the server's one-way delay makes a round trip to
//! that server `2 x delay` longer, as if it were that far away.
//!
//! Why a relay and not a qdisc: the lab kernel has no `netem` (nor `fq` / `etf`), and a
//! relay on the path keeps the resolvers' view untouched: the servers' real addresses and
//! ports, their MAC addresses (the relay is invisible at layer 2), TCP, ICMP, ARP and
//! neighbour discovery all pass, spoofed packets too.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// The command line, parsed.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The two interfaces bridged (frames from `a` go out on `b` and back).
    pub a: String,
    pub b: String,
    /// One-way delay by address (both directions of a frame to or from it).
    pub delays: Vec<(IpAddr, Duration)>,
    /// The delay of frames no listed address matches.
    pub default: Duration,
}

/// A command line error, printed by the binary as `xdns-lab-delay: <reason>`.
#[derive(Debug, Clone, PartialEq)]
pub struct ArgError(pub String);

impl fmt::Display for ArgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

pub const USAGE: &str = "usage: xdns-lab-delay --a IF --b IF [--delay ADDR=MS]... [--default-ms MS]

Bridges interfaces IF and IF (raw packet sockets), holding each frame for the one-way delay
of its source or destination address (the larger), --default-ms for any other frame.
MS may have decimals. SIGUSR1 prints the counters as one JSON line on stdout; SIGTERM and
SIGINT print them and exit.";

fn parse_ms(s: &str, what: &str) -> Result<Duration, ArgError> {
    let ms: f64 = s
        .parse()
        .map_err(|_| ArgError(format!("{what}: {s:?} is not a number of milliseconds")))?;
    if !ms.is_finite() || !(0.0..=60_000.0).contains(&ms) {
        return Err(ArgError(format!("{what}: {s} ms is outside 0 ..= 60000")));
    }
    Ok(Duration::from_nanos((ms * 1e6).round() as u64))
}

impl Config {
    /// Parse the arguments after the program name.
    pub fn parse<I: IntoIterator<Item = String>>(args: I) -> Result<Config, ArgError> {
        let mut a = None;
        let mut b = None;
        let mut delays = Vec::new();
        let mut default = Duration::ZERO;
        let mut it = args.into_iter();
        while let Some(arg) = it.next() {
            let mut value = |name: &str| {
                it.next()
                    .ok_or_else(|| ArgError(format!("{name} needs a value")))
            };
            match arg.as_str() {
                "--a" => a = Some(value("--a")?),
                "--b" => b = Some(value("--b")?),
                "--default-ms" => default = parse_ms(&value("--default-ms")?, "--default-ms")?,
                "--delay" => {
                    let v = value("--delay")?;
                    let (addr, ms) = v
                        .rsplit_once('=')
                        .ok_or_else(|| ArgError(format!("--delay {v}: expected ADDR=MS")))?;
                    let ip: IpAddr = addr.parse().map_err(|_| {
                        ArgError(format!("--delay {v}: {addr:?} is not an IP address"))
                    })?;
                    delays.push((ip, parse_ms(ms, &format!("--delay {v}"))?));
                }
                "-h" | "--help" => return Err(ArgError(USAGE.into())),
                other => return Err(ArgError(format!("unknown argument {other:?}\n{USAGE}"))),
            }
        }
        let a = a.ok_or_else(|| ArgError(format!("--a is required\n{USAGE}")))?;
        let b = b.ok_or_else(|| ArgError(format!("--b is required\n{USAGE}")))?;
        if a == b {
            return Err(ArgError(format!(
                "--a and --b are the same interface ({a})"
            )));
        }
        Ok(Config {
            a,
            b,
            delays,
            default,
        })
    }
}

/// Address → one-way delay, looked up per frame.
#[derive(Debug, Clone)]
pub struct DelayTable {
    by_addr: HashMap<[u8; 16], Duration>,
    default: Duration,
}

const ETH_HLEN: usize = 14;

fn key(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

impl DelayTable {
    pub fn new(delays: &[(IpAddr, Duration)], default: Duration) -> DelayTable {
        DelayTable {
            by_addr: delays.iter().map(|&(ip, d)| (key(ip), d)).collect(),
            default,
        }
    }

    fn lookup(&self, k: [u8; 16]) -> Option<Duration> {
        self.by_addr.get(&k).copied()
    }

    /// The delay of one Ethernet frame (starting at the destination MAC): the larger delay of
    /// its IP source and destination when either is listed, else the default. Short or
    /// non-IP frames get the default; nothing in the frame is trusted beyond its length.
    pub fn of_frame(&self, frame: &[u8]) -> Duration {
        if frame.len() < ETH_HLEN {
            return self.default;
        }
        let ethertype = u16::from_be_bytes([frame[12], frame[13]]);
        let ip = &frame[ETH_HLEN..];
        let (src, dst) = match ethertype {
            0x0800 if ip.len() >= 20 => {
                let mut s = [0u8; 4];
                let mut d = [0u8; 4];
                s.copy_from_slice(&ip[12..16]);
                d.copy_from_slice(&ip[16..20]);
                (key(IpAddr::from(s)), key(IpAddr::from(d)))
            }
            0x86DD if ip.len() >= 40 => {
                let mut s = [0u8; 16];
                let mut d = [0u8; 16];
                s.copy_from_slice(&ip[8..24]);
                d.copy_from_slice(&ip[24..40]);
                (s, d)
            }
            _ => return self.default,
        };
        match (self.lookup(src), self.lookup(dst)) {
            (Some(a), Some(b)) => a.max(b),
            (Some(a), None) | (None, Some(a)) => a,
            (None, None) => self.default,
        }
    }
}

/// One held frame: when it is due and its bytes (the buffer goes back to a pool once sent).
#[derive(Debug)]
pub struct Held {
    pub due: Instant,
    pub buf: Vec<u8>,
}

/// Frames waiting for their time, per output interface. Frames of one delay value leave in
/// the order they came (one FIFO per (output, delay): its due times only grow), so taking
/// the due frames is O(frames) and no heap is needed; there are as many FIFOs as distinct
/// delays, a handful.
#[derive(Debug, Default)]
pub struct Queues {
    fifos: Vec<(usize, Duration, VecDeque<Held>)>,
    held: usize,
    /// The most frames ever held at once.
    pub max_held: usize,
}

impl Queues {
    pub fn new() -> Queues {
        Queues::default()
    }

    /// Hold `buf`, received at `now`, for `delay`, then send it on output `out`.
    pub fn push(&mut self, out: usize, delay: Duration, now: Instant, buf: Vec<u8>) {
        let i = match self
            .fifos
            .iter()
            .position(|(o, d, _)| *o == out && *d == delay)
        {
            Some(i) => i,
            None => {
                self.fifos.push((out, delay, VecDeque::new()));
                self.fifos.len() - 1
            }
        };
        self.fifos[i].2.push_back(Held {
            due: now + delay,
            buf,
        });
        self.held += 1;
        self.max_held = self.max_held.max(self.held);
    }

    /// Move every frame due at `now` for output `out` into `into` (oldest due first within a
    /// delay value).
    pub fn take_due(&mut self, out: usize, now: Instant, into: &mut Vec<Vec<u8>>) {
        for (o, _, q) in self.fifos.iter_mut() {
            if *o != out {
                continue;
            }
            while q.front().is_some_and(|h| h.due <= now) {
                into.push(q.pop_front().expect("front checked").buf);
                self.held -= 1;
            }
        }
    }

    /// When the next frame is due, if any is held.
    pub fn next_due(&self) -> Option<Instant> {
        self.fifos
            .iter()
            .filter_map(|(_, _, q)| q.front().map(|h| h.due))
            .min()
    }

    /// Frames held now.
    pub fn held(&self) -> usize {
        self.held
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn parses_a_full_command_line() {
        let c = Config::parse(args(
            "--a ra --b rb --delay 198.18.1.2=5 --delay 2001:db8:1::2=0.25 --default-ms 1",
        ))
        .unwrap();
        assert_eq!(c.a, "ra");
        assert_eq!(c.b, "rb");
        assert_eq!(
            c.delays,
            vec![
                ("198.18.1.2".parse().unwrap(), Duration::from_millis(5)),
                ("2001:db8:1::2".parse().unwrap(), Duration::from_micros(250)),
            ]
        );
        assert_eq!(c.default, Duration::from_millis(1));
    }

    #[test]
    fn rejects_bad_command_lines_with_a_reason() {
        for (line, reason) in [
            ("--b rb", "--a is required"),
            ("--a ra --b ra", "the same interface"),
            ("--a ra --b rb --delay 198.18.1.2", "expected ADDR=MS"),
            ("--a ra --b rb --delay host=5", "not an IP address"),
            ("--a ra --b rb --delay 198.18.1.2=-1", "outside 0 ..= 60000"),
            ("--a ra --b rb --delay 198.18.1.2=soon", "not a number"),
            ("--a ra --b rb --default-ms", "needs a value"),
            ("--a ra --b rb --jitter 3", "unknown argument"),
        ] {
            let e = Config::parse(args(line)).unwrap_err();
            assert!(e.0.contains(reason), "{line}: {e}");
        }
    }

    fn eth(ethertype: u16, ip: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&ethertype.to_be_bytes());
        f.extend_from_slice(ip);
        f
    }

    fn v4(src: [u8; 4], dst: [u8; 4]) -> Vec<u8> {
        let mut ip = vec![0x45u8; 20];
        ip[12..16].copy_from_slice(&src);
        ip[16..20].copy_from_slice(&dst);
        eth(0x0800, &ip)
    }

    fn v6(src: &str, dst: &str) -> Vec<u8> {
        let mut ip = vec![0x60u8; 40];
        let s: std::net::Ipv6Addr = src.parse().unwrap();
        let d: std::net::Ipv6Addr = dst.parse().unwrap();
        ip[8..24].copy_from_slice(&s.octets());
        ip[24..40].copy_from_slice(&d.octets());
        eth(0x86DD, &ip)
    }

    #[test]
    fn a_frame_gets_the_delay_of_its_listed_address_either_way() {
        let ms = Duration::from_millis;
        let t = DelayTable::new(
            &[
                ("198.18.9.2".parse().unwrap(), ms(5)),
                ("198.18.9.3".parse().unwrap(), ms(20)),
                ("2001:db8:9::2".parse().unwrap(), ms(7)),
            ],
            ms(1),
        );
        assert_eq!(
            t.of_frame(&v4([198, 18, 1, 1], [198, 18, 9, 2])),
            ms(5),
            "query to the server"
        );
        assert_eq!(
            t.of_frame(&v4([198, 18, 9, 2], [198, 18, 1, 1])),
            ms(5),
            "its reply"
        );
        assert_eq!(
            t.of_frame(&v4([198, 18, 9, 2], [198, 18, 9, 3])),
            ms(20),
            "both listed: the larger"
        );
        assert_eq!(
            t.of_frame(&v4([198, 18, 1, 1], [198, 18, 1, 2])),
            ms(1),
            "unlisted: default"
        );
        assert_eq!(t.of_frame(&v6("2001:db8:1::1", "2001:db8:9::2")), ms(7));
        assert_eq!(t.of_frame(&v6("2001:db8:9::2", "2001:db8:1::1")), ms(7));
        // 198.18.9.2 as an IPv6 address (v4-mapped) is not the IPv4 server
        assert_eq!(
            t.of_frame(&v6("::ffff:198.18.9.3", "2001:db8:1::1")),
            ms(20)
        );
        assert_eq!(t.of_frame(&eth(0x0806, &[0u8; 28])), ms(1), "ARP: default");
        assert_eq!(
            t.of_frame(&v4([198, 18, 9, 2], [1, 1, 1, 1])[..30]),
            ms(1),
            "truncated IPv4"
        );
        assert_eq!(t.of_frame(&[0u8; 5]), ms(1), "runt");
    }

    #[test]
    fn queues_release_frames_when_due_in_order_per_output() {
        let ms = Duration::from_millis;
        let t0 = Instant::now();
        let mut q = Queues::new();
        q.push(1, ms(10), t0, vec![1]);
        q.push(1, ms(2), t0, vec![2]);
        q.push(0, ms(0), t0, vec![3]);
        q.push(1, ms(10), t0 + ms(1), vec![4]);
        assert_eq!(q.held(), 4);
        assert_eq!(q.max_held, 4);
        assert_eq!(q.next_due(), Some(t0));
        let mut out = Vec::new();
        q.take_due(1, t0 + ms(1), &mut out);
        assert!(out.is_empty(), "nothing due on output 1 yet: {out:?}");
        q.take_due(0, t0, &mut out);
        assert_eq!(out, vec![vec![3]]);
        out.clear();
        assert_eq!(q.next_due(), Some(t0 + ms(2)));
        q.take_due(1, t0 + ms(10), &mut out);
        assert_eq!(out, vec![vec![1], vec![2]]);
        out.clear();
        assert_eq!(q.next_due(), Some(t0 + ms(11)));
        q.take_due(1, t0 + ms(11), &mut out);
        assert_eq!(out, vec![vec![4]]);
        assert_eq!(q.held(), 0);
        assert_eq!(q.next_due(), None);
    }
}
