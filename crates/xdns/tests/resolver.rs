//! `[resolver]`: recursion against a tiny fake authoritative server on 127.0.0.1 (the root
//! hints point at it, `upstream_port` at its port), REFUSED outside `allow`, RD=0, SERVFAIL,
//! counters, and configuration errors.

mod common;

use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use domain::base::iana::Rcode;

/// A fake authority for the whole tree ("."): `*.example.test` A 198.18.7.7 (TTL 300);
/// names starting with `nx` do not exist (NXDOMAIN with the root SOA); other names under
/// `test` have no A (NODATA). The question is echoed byte for byte (0x20 case kept).
struct FakeAuthority {
    port: u16,
    queries: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

fn fake_answer(q: &[u8]) -> Option<Vec<u8>> {
    if q.len() < 17 {
        return None;
    }
    // The question name.
    let mut pos = 12;
    let mut labels = Vec::new();
    while q[pos] != 0 {
        let l = q[pos] as usize;
        labels.push(String::from_utf8_lossy(&q[pos + 1..pos + 1 + l]).to_ascii_lowercase());
        pos += 1 + l;
    }
    let qend = pos + 5;
    let qtype = u16::from_be_bytes([q[pos + 1], q[pos + 2]]);
    let name = labels.join(".");
    let mut m = Vec::new();
    m.extend_from_slice(&q[0..2]);
    let soa = |m: &mut Vec<u8>| {
        m.extend_from_slice(&[0, 0, 6, 0, 1, 0, 0, 0x0e, 0x10]);
        let rdata = [
            &wire_name("a.root.test.")[..],
            &wire_name("h.test.")[..],
            &[0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 30],
        ]
        .concat();
        m.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
        m.extend_from_slice(&rdata);
    };
    if labels.first().is_some_and(|l| l.starts_with("nx")) {
        m.extend_from_slice(&[0x84, 0x03, 0, 1, 0, 0, 0, 1, 0, 0]);
        m.extend_from_slice(&q[12..qend]);
        soa(&mut m);
    } else if name.ends_with("example.test") && qtype == 1 {
        m.extend_from_slice(&[0x84, 0x00, 0, 1, 0, 1, 0, 0, 0, 0]);
        m.extend_from_slice(&q[12..qend]);
        m.extend_from_slice(&[0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 1, 0x2c, 0, 4, 198, 18, 7, 7]);
    } else {
        m.extend_from_slice(&[0x84, 0x00, 0, 1, 0, 0, 0, 1, 0, 0]);
        m.extend_from_slice(&q[12..qend]);
        soa(&mut m);
    }
    Some(m)
}

impl FakeAuthority {
    fn start() -> Self {
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        sock.set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        let port = sock.local_addr().unwrap().port();
        let queries = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (q2, s2) = (queries.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while !s2.load(Relaxed) {
                let Ok((n, from)) = sock.recv_from(&mut buf) else {
                    continue;
                };
                q2.fetch_add(1, Relaxed);
                if let Some(a) = fake_answer(&buf[..n]) {
                    let _ = sock.send_to(&a, from);
                }
            }
        });
        FakeAuthority {
            port,
            queries,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for FakeAuthority {
    fn drop(&mut self) {
        self.stop.store(true, Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

const HINTS: &str = ". 3600000 NS a.root.test.\na.root.test. 3600000 A 127.0.0.1\n";

fn rd(mut q: Vec<u8>) -> Vec<u8> {
    q[2] |= 0x01;
    q
}

/// One UDP exchange returning the raw reply.
fn udp_raw(addr: SocketAddr, q: &[u8]) -> Vec<u8> {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.set_read_timeout(Some(Duration::from_secs(8))).unwrap();
    s.connect(addr).unwrap();
    s.send(q).unwrap();
    let mut buf = vec![0u8; 65535];
    let n = s.recv(&mut buf).expect("no answer");
    buf.truncate(n);
    buf
}

fn start(dir: &TempDir, resolver: &str) -> Server {
    dir.write("z.zone", &zone_text(1, 10));
    dir.write("root.hints", HINTS);
    Server::start(dir, &dir.path("z.zone"), resolver)
}

#[test]
fn resolves_caches_and_keeps_authoritative_zones() {
    let auth = FakeAuthority::start();
    let dir = TempDir::new("res-basic");
    let s = start(
        &dir,
        &format!("[resolver]\nroot_hints = \"root.hints\"\nallow = [\"127.0.0.0/8\"]\nupstream_port = {}\n", auth.port),
    );
    // A recursive answer: RA=1, AA=0, the fake's address.
    let raw = udp_raw(s.addr, &rd(query(7, "www.Example.test.", 1, Some(1232))));
    assert!(raw[3] & 0x80 != 0, "RA");
    let a = parse(raw);
    assert_eq!(a.rcode, Rcode::NOERROR);
    assert!(!a.aa);
    assert_eq!(
        a.a,
        vec!["198.18.7.7".parse::<std::net::Ipv4Addr>().unwrap()]
    );
    let asked = auth.queries.load(Relaxed);
    assert!(asked >= 1);
    // Cached: no new upstream query, over UDP and TCP.
    for q in [
        rd(query(8, "www.example.test.", 1, None)),
        rd(query(9, "WWW.example.test.", 1, None)),
    ] {
        let a = parse(udp_raw(s.addr, &q));
        assert_eq!(a.a.len(), 1);
        assert_eq!(a.id, u16::from_be_bytes([q[0], q[1]]));
    }
    // RD=0, even cached: REFUSED with RA (as Unbound).
    let raw = udp_raw(s.addr, &query(19, "www.example.test.", 1, None));
    assert!(raw[3] & 0x80 != 0, "RA");
    assert_eq!(parse(raw).rcode, Rcode::REFUSED);
    let t = tcp(s.addr, &rd(query(10, "www.example.test.", 1, None)));
    assert_eq!(t.a.len(), 1);
    assert_eq!(auth.queries.load(Relaxed), asked);
    // A miss over TCP.
    let t = tcp(s.addr, &rd(query(11, "mail.example.test.", 1, None)));
    assert_eq!(t.a.len(), 1);
    // Negative answers.
    assert_eq!(
        parse(udp_raw(
            s.addr,
            &rd(query(12, "nx1.example.test.", 1, None))
        ))
        .rcode,
        Rcode::NXDOMAIN
    );
    assert_eq!(
        parse(udp_raw(s.addr, &rd(query(13, "other.test.", 1, None)))).rcode,
        Rcode::NOERROR
    );
    // RD=0 and not cached: REFUSED.
    assert_eq!(
        parse(udp_raw(s.addr, &query(14, "new.example.test.", 1, None))).rcode,
        Rcode::REFUSED
    );
    // The served zone is still authoritative.
    let a = parse(udp_raw(s.addr, &rd(query(15, "www.example.com.", 1, None))));
    assert!(a.aa);
    assert_eq!(
        a.a,
        vec!["198.18.0.10".parse::<std::net::Ipv4Addr>().unwrap()]
    );
    let st = s.stats();
    let r = &st["resolver"];
    assert!(r["cache_hits"].as_u64().unwrap() >= 3, "{r}");
    assert!(r["cache_misses"].as_u64().unwrap() >= 4, "{r}");
    assert!(r["upstream_queries"].as_u64().unwrap() >= 4, "{r}");
    assert!(
        r.get("servfails").is_some() && r.get("upstream_timeouts").is_some(),
        "{r}"
    );
    // SIGHUP keeps the cache.
    s.signal(libc::SIGHUP);
    std::thread::sleep(Duration::from_millis(500));
    let before = auth.queries.load(Relaxed);
    assert_eq!(
        parse(udp_raw(
            s.addr,
            &rd(query(16, "www.example.test.", 1, None))
        ))
        .a
        .len(),
        1
    );
    assert_eq!(auth.queries.load(Relaxed), before);
    // `xdns flush` empties it.
    let out = Command::new(bin())
        .args(["flush", "--control"])
        .arg(&s.control)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.starts_with("ok "), "{stdout}");
    let a = parse(udp_raw(
        s.addr,
        &rd(query(17, "www.example.test.", 1, None)),
    ));
    assert_eq!(a.a.len(), 1);
    assert!(auth.queries.load(Relaxed) > before);
}

/// SIGHUP applies the resolver's tunables at once and keeps its cache: with `upstream_port`
/// pointed at a port nobody answers, a new name gets SERVFAIL (after the new, short timeouts)
/// while a cached one is still answered; a fixed setting (`cache_entries`) is only reported.
#[test]
fn reload_applies_resolver_settings_and_keeps_the_cache() {
    let auth = FakeAuthority::start();
    let dir = TempDir::new("res-reload");
    let base = "[resolver]\nroot_hints = \"root.hints\"\nallow = [\"127.0.0.0/8\"]\n";
    let s = start(&dir, &format!("{base}upstream_port = {}\n", auth.port));
    let a = parse(udp_raw(s.addr, &rd(query(1, "www.example.test.", 1, None))));
    assert_eq!(a.a.len(), 1);
    let text = std::fs::read_to_string(&s.config).unwrap().replace(
        &format!("upstream_port = {}\n", auth.port),
        &format!(
            "upstream_port = {}\nupstream_timeout_ms = 100\nresolve_timeout_ms = 400\ncache_entries = 5000\n",
            free_port()
        ),
    );
    std::fs::write(&s.config, text).unwrap();
    s.signal(libc::SIGHUP);
    let t0 = std::time::Instant::now();
    while !s.log_text().contains("resolver settings replaced") {
        assert!(t0.elapsed() < Duration::from_secs(10), "{}", s.log_text());
        std::thread::sleep(Duration::from_millis(20));
    }
    let asked = auth.queries.load(Relaxed);
    let a = parse(udp_raw(s.addr, &rd(query(2, "www.example.test.", 1, None))));
    assert_eq!(a.a.len(), 1, "the cache survived the reload");
    let t0 = std::time::Instant::now();
    let a = parse(udp_raw(s.addr, &rd(query(3, "new.example.test.", 1, None))));
    assert_eq!(a.rcode, Rcode::SERVFAIL, "asked the new port");
    assert!(t0.elapsed() < Duration::from_secs(2), "the new timeouts: {:?}", t0.elapsed());
    assert_eq!(auth.queries.load(Relaxed), asked, "nothing went to the old port");
    let log = s.log_text();
    assert!(log.contains("resolver.cache_entries"), "fixed settings reported: {log}");
}

#[test]
fn wildcard_listener_answers_from_the_queried_address_and_tcp_pipelines() {
    let auth = FakeAuthority::start();
    let dir = TempDir::new("res-wild");
    dir.write("z.zone", &zone_text(1, 10));
    dir.write("root.hints", HINTS);
    let port = free_port();
    let listen: SocketAddr = format!("0.0.0.0:{port}").parse().unwrap();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let s = Server::start_on(
        &dir,
        &dir.path("z.zone"),
        &format!(
            "[resolver]\nroot_hints = \"root.hints\"\nupstream_port = {}\n",
            auth.port
        ),
        addr,
        &[listen],
    );
    // Connected client socket: only a reply from exactly 127.0.0.1:port is received.
    let a = parse(udp_raw(s.addr, &rd(query(1, "www.example.test.", 1, None))));
    assert_eq!(a.a.len(), 1);
    // TCP: a recursive miss and an authoritative answer pipelined on one connection; both
    // come back (the authoritative one may come first).
    let mut c = TcpStream::connect(s.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(8))).unwrap();
    use std::io::Write;
    c.write_all(&tcp_frame(&[
        rd(query(21, "new.example.test.", 1, None)),
        rd(query(22, "www.example.com.", 1, None)),
    ]))
    .unwrap();
    let mut ids: Vec<u16> = (0..2)
        .map(|_| parse(tcp_read(&mut c).unwrap()).id)
        .collect();
    ids.sort();
    assert_eq!(ids, vec![21, 22]);
}

#[test]
fn clients_outside_allow_are_refused_but_zones_answered() {
    let auth = FakeAuthority::start();
    let dir = TempDir::new("res-allow");
    let s = start(
        &dir,
        &format!("[resolver]\nroot_hints = \"root.hints\"\nallow = [\"198.18.0.0/15\"]\nupstream_port = {}\n", auth.port),
    );
    // Root priming at start asks upstream once; refused clients must add nothing to that.
    let t0 = std::time::Instant::now();
    loop {
        let st = s.stats();
        let r = &st["resolver"];
        if r["primings"].as_u64().unwrap_or(0) + r["priming_failures"].as_u64().unwrap_or(0) > 0 {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(5), "no priming: {st}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let primed = auth.queries.load(Relaxed);
    let a = parse(udp_raw(s.addr, &rd(query(1, "www.example.test.", 1, None))));
    assert_eq!(a.rcode, Rcode::REFUSED);
    assert_eq!(
        tcp(s.addr, &rd(query(2, "www.example.test.", 1, None))).rcode,
        Rcode::REFUSED
    );
    assert_eq!(auth.queries.load(Relaxed), primed);
    let a = parse(udp_raw(s.addr, &rd(query(3, "www.example.com.", 1, None))));
    assert_eq!(a.rcode, Rcode::NOERROR);
    assert!(a.aa);
    // A reload that allows 127.0.0.0/8 applies at once, without a restart.
    let text = std::fs::read_to_string(&s.config)
        .unwrap()
        .replace("198.18.0.0/15", "127.0.0.0/8");
    dir.write("xdns.toml", &text);
    s.signal(libc::SIGHUP);
    let t0 = std::time::Instant::now();
    loop {
        let a = parse(udp_raw(s.addr, &rd(query(4, "www.example.test.", 1, None))));
        if a.rcode == Rcode::NOERROR {
            assert_eq!(a.a.len(), 1);
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(5), "allow not reloaded");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!s.log_text().contains("restart needed"), "{}", s.log_text());
}

#[test]
fn silent_upstream_gives_servfail() {
    // Nothing listens on this port.
    let port = free_port();
    let dir = TempDir::new("res-fail");
    let s = start(
        &dir,
        &format!(
            "[resolver]\nroot_hints = \"root.hints\"\nupstream_port = {port}\nupstream_timeout_ms = 100\nresolve_timeout_ms = 1000\n"
        ),
    );
    let raw = udp_raw(s.addr, &rd(query(1, "www.example.test.", 1, None)));
    assert!(raw[3] & 0x80 != 0, "RA");
    assert_eq!(parse(raw).rcode, Rcode::SERVFAIL);
    // Cached failure: answered at once.
    let t0 = std::time::Instant::now();
    assert_eq!(
        parse(udp_raw(s.addr, &rd(query(2, "www.example.test.", 1, None)))).rcode,
        Rcode::SERVFAIL
    );
    assert!(t0.elapsed() < Duration::from_millis(500));
    let st = s.stats();
    assert!(st["resolver"]["servfails"].as_u64().unwrap() >= 2, "{st}");
    assert!(
        st["resolver"]["failure_cache_hits"].as_u64().unwrap() >= 1,
        "{st}"
    );
    let _ = TcpStream::connect(s.addr);
}

#[test]
fn config_errors_name_file_and_line() {
    let dir = TempDir::new("res-cfg");
    dir.write("root.hints", HINTS);
    dir.write("bad.hints", ". 1 NS a.\na. 1 A 300.0.0.1\n");
    let table: &[(&str, &str)] = &[
        (
            "[resolver]\nroot_hints = \"root.hints\"\nturbo = 1\n",
            ":3:",
        ),
        ("[resolver]\nroot_hints = \"missing.hints\"\n", ":2:"),
        (
            "[resolver]\nroot_hints = \"root.hints\"\nallow = [\"10.0.0.0/8\",\n \"nope\"]\n",
            ":4:",
        ),
        (
            "\n[resolver]\nroot_hints = \"root.hints\"\nfanout = 0\n",
            ":4:",
        ),
        ("[resolver]\nallow = []\n", "root_hints"),
        ("[resolver]\nroot_hints = \"bad.hints\"\n", "bad.hints:2:"),
    ];
    for (text, needle) in table {
        let cfg = dir.write("xdns.toml", text);
        let out = Command::new(bin())
            .args(["check", "--config"])
            .arg(&cfg)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{text}: {err}");
        assert!(err.contains(needle), "{text}: {err}");
    }
    let cfg = dir.write("xdns.toml", "[resolver]\nroot_hints = \"root.hints\"\n");
    let out = Command::new(bin())
        .args(["check", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("1 servers"));
}
