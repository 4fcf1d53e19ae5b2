//! End-to-end tests of `xdns serve` on 127.0.0.1: UDP and TCP answers, pipelining, idle
//! timeout, stats, metrics, reload under load, and clean shutdown.

mod common;

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use domain::base::iana::Rcode;

const A: u16 = 1;
const TXT: u16 = 16;
const AAAA: u16 = 28;
const T: Duration = Duration::from_secs(3);

#[test]
fn answers_udp_tcp_pipelined_and_counts_them() {
    let dir = TempDir::new("answers");
    let zone = dir.write("example.com.zone", &zone_text(1, 10));
    let mut srv = Server::start(&dir, &zone, "");

    // UDP: a positive answer, a name error, a truncated answer.
    let r = udp(srv.addr, &query(0x1111, "www.example.com.", A, None), T).expect("UDP answer");
    assert_eq!(r.id, 0x1111);
    assert_eq!(r.rcode, Rcode::NOERROR);
    assert!(r.aa);
    assert_eq!(r.a, vec![Ipv4Addr::new(198, 18, 0, 10)]);
    let r = udp(srv.addr, &query(2, "nope.example.com.", A, None), T).expect("UDP answer");
    assert_eq!(r.rcode, Rcode::NXDOMAIN);
    let r = udp(srv.addr, &query(3, "big.example.com.", TXT, None), T).expect("UDP answer");
    assert!(
        r.tc,
        "an 800-byte TXT answer must be truncated in 512 bytes"
    );
    assert_eq!(r.ancount, 0);

    // TCP: the same big answer is never truncated.
    let r = tcp(srv.addr, &query(4, "big.example.com.", TXT, None));
    assert!(!r.tc);
    assert_eq!(r.ancount, 1);
    assert_eq!(r.id, 4);

    // Pipelining: three queries in one write, three answers.
    let mut s = TcpStream::connect(srv.addr).unwrap();
    s.set_read_timeout(Some(T)).unwrap();
    let qs = vec![
        query(10, "www.example.com.", A, None),
        query(11, "nope.example.com.", A, None),
        query(12, "www.example.com.", AAAA, None),
    ];
    s.write_all(&tcp_frame(&qs)).unwrap();
    let mut ids: Vec<u16> = (0..3)
        .map(|_| parse(tcp_read(&mut s).unwrap()).id)
        .collect();
    ids.sort_unstable();
    assert_eq!(ids, vec![10, 11, 12]);
    drop(s);

    // A message that is not a query: dropped and counted, server still answers afterwards.
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.send_to(&[1, 2, 3], srv.addr).unwrap();
    assert!(udp(srv.addr, &query(5, "www.example.com.", A, None), T).is_some());

    let st = srv.stats();
    assert_eq!(st["queries"]["udp"], 5, "{st}");
    assert_eq!(st["queries"]["tcp"], 4, "{st}");
    assert_eq!(st["qtypes"]["A"], 5, "{st}");
    assert_eq!(st["rcodes"]["NOERROR"], 6, "{st}");
    assert_eq!(st["qtypes"]["TXT"], 2, "{st}");
    assert_eq!(st["qtypes"]["AAAA"], 1, "{st}");
    assert_eq!(st["qtypes_by_proto"]["tcp"]["TXT"], 1, "{st}");
    assert_eq!(st["rcodes"]["NXDOMAIN"], 2, "{st}");
    assert_eq!(st["truncated"], 1, "{st}");
    assert_eq!(st["dropped"]["malformed"], 1, "{st}");
    assert_eq!(st["tcp"]["accepted"], 2, "{st}");
    assert_eq!(st["zones"][0]["name"], "example.com.", "{st}");
    assert_eq!(st["zones"][0]["serial"], 1, "{st}");
    assert!(st["uptime_seconds"].is_u64());

    // The human table.
    let out = std::process::Command::new(bin())
        .args(["stats", "--control"])
        .arg(&srv.control)
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert!(
        table.contains("queries.udp") && table.contains("rcode.NXDOMAIN"),
        "{table}"
    );

    // `stats --config` finds the socket through the configuration.
    let out = std::process::Command::new(bin())
        .args(["stats", "--json", "--config"])
        .arg(&srv.config)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    srv.signal(libc::SIGTERM);
    let st = srv
        .wait(Duration::from_secs(10))
        .expect("xdns did not stop on SIGTERM");
    assert!(st.success(), "exit status {st}");
    assert!(!srv.control.exists(), "control socket left behind");
}

#[test]
fn idle_tcp_connection_is_closed() {
    let dir = TempDir::new("idle");
    let zone = dir.write("example.com.zone", &zone_text(1, 10));
    let srv = Server::start(&dir, &zone, "[tcp]\nidle_timeout_ms = 300\n");
    let mut s = TcpStream::connect(srv.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    // One query answered, then silence.
    s.write_all(&tcp_frame(&[query(1, "www.example.com.", A, None)]))
        .unwrap();
    assert_eq!(parse(tcp_read(&mut s).unwrap()).id, 1);
    let t0 = Instant::now();
    let mut b = [0u8; 1];
    let n = s.read(&mut b).unwrap_or(0);
    assert_eq!(n, 0, "expected EOF from the idle timeout");
    let waited = t0.elapsed();
    assert!(
        waited >= Duration::from_millis(250) && waited < Duration::from_secs(4),
        "{waited:?}"
    );
    assert_eq!(srv.stats()["tcp"]["idle_closed"], 1);
}

#[test]
fn sigint_stops_cleanly() {
    let dir = TempDir::new("sigint");
    let zone = dir.write("example.com.zone", &zone_text(1, 10));
    let mut srv = Server::start(&dir, &zone, "");
    srv.signal(libc::SIGINT);
    let st = srv
        .wait(Duration::from_secs(10))
        .expect("xdns did not stop on SIGINT");
    assert!(st.success());
    assert!(!srv.control.exists());
}

#[test]
fn reload_swaps_zone_without_missing_a_query_and_keeps_old_on_error() {
    let dir = TempDir::new("reload");
    let zone = dir.write("example.com.zone", &zone_text(1, 10));
    let mut srv = Server::start(&dir, &zone, "");
    assert!(
        srv.log_text().contains("xdns started"),
        "{}",
        srv.log_text()
    );

    // A client that keeps querying and records what it sees.
    let stop = Arc::new(AtomicBool::new(false));
    let missed = Arc::new(AtomicU64::new(0));
    let seen_new = Arc::new(AtomicBool::new(false));
    let answered = Arc::new(AtomicU64::new(0));
    let client = {
        let (stop, missed, seen_new, answered) = (
            stop.clone(),
            missed.clone(),
            seen_new.clone(),
            answered.clone(),
        );
        let addr = srv.addr;
        std::thread::spawn(move || {
            let mut id = 0u16;
            while !stop.load(Ordering::Relaxed) {
                id = id.wrapping_add(1);
                match udp(
                    addr,
                    &query(id, "www.example.com.", A, Some(1232)),
                    Duration::from_secs(2),
                ) {
                    Some(r) if r.id == id && r.rcode == Rcode::NOERROR && r.a.len() == 1 => {
                        answered.fetch_add(1, Ordering::Relaxed);
                        if r.a[0] == Ipv4Addr::new(198, 18, 0, 99) {
                            seen_new.store(true, Ordering::Relaxed);
                        }
                    }
                    _ => {
                        missed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        })
    };

    std::thread::sleep(Duration::from_millis(200));
    dir.write("example.com.zone", &zone_text(2, 99));
    srv.signal(libc::SIGHUP);
    let t0 = Instant::now();
    while !seen_new.load(Ordering::Relaxed) {
        assert!(
            t0.elapsed() < Duration::from_secs(15),
            "new zone never answered: {}",
            srv.log_text()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let st = srv.stats();
    assert_eq!(st["zones"][0]["serial"], 2, "{st}");
    assert_eq!(st["reloads"]["total"], 1);
    assert_eq!(st["reloads"]["failed"], 0);

    // A broken zone: the old data keeps serving, the error is logged with file:line.
    dir.write("example.com.zone", "$TTL 300\n@ IN SOA ns1.example.com. h.example.com. 3 1 1 1 1\n@ IN NS ns1\nns1 IN A 198.18.0.1\nwww IN A 198.18.0.300\n");
    srv.signal(libc::SIGHUP);
    let t0 = Instant::now();
    loop {
        let st = srv.stats();
        if st["reloads"]["total"] == 2 && st["reloads"]["failed"] == 1 {
            assert_eq!(st["reloads"]["zones_failed"], 1);
            assert_eq!(st["zones"][0]["serial"], 2, "old zone must stay: {st}");
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(15),
            "failed reload not counted: {st}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let r = udp(srv.addr, &query(7, "www.example.com.", A, None), T)
        .expect("answer after failed reload");
    assert_eq!(r.a, vec![Ipv4Addr::new(198, 18, 0, 99)]);
    let log = srv.log_text();
    assert!(
        log.contains(&format!("{}:5:", zone.display())),
        "error must name FILE:LINE: {log}"
    );

    // A broken configuration: nothing changes, the error names the config file and line.
    let good_cfg = std::fs::read_to_string(&srv.config).unwrap();
    dir.write("xdns.toml", &format!("{good_cfg}\n[tcp]\nbogus_key = 1\n"));
    let bad_line = good_cfg.lines().count() + 3;
    srv.signal(libc::SIGHUP);
    let t0 = Instant::now();
    while srv.stats()["reloads"]["failed"] != 2 {
        assert!(
            t0.elapsed() < Duration::from_secs(15),
            "bad config reload not counted"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let log = srv.log_text();
    assert!(
        log.contains(&format!(
            "{}:{bad_line}: unknown field `bogus_key`",
            srv.config.display()
        )),
        "{log}"
    );
    let r =
        udp(srv.addr, &query(8, "www.example.com.", A, None), T).expect("answer after bad config");
    assert_eq!(r.a, vec![Ipv4Addr::new(198, 18, 0, 99)]);

    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, Ordering::Relaxed);
    client.join().unwrap();
    assert!(answered.load(Ordering::Relaxed) > 10);
    assert_eq!(
        missed.load(Ordering::Relaxed),
        0,
        "queries went unanswered during reload"
    );

    srv.signal(libc::SIGTERM);
    assert!(srv
        .wait(Duration::from_secs(10))
        .expect("no exit")
        .success());
    assert!(!srv.control.exists());
}

#[test]
fn metrics_endpoint_serves_counters() {
    let dir = TempDir::new("metrics");
    let zone = dir.write("example.com.zone", &zone_text(5, 10));
    let port = free_port();
    let srv = Server::start(&dir, &zone, &format!("metrics = \"127.0.0.1:{port}\""));
    udp(srv.addr, &query(1, "www.example.com.", A, None), T).expect("answer");
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(T)).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).unwrap();
    assert!(body.starts_with("HTTP/1.1 200 OK"), "{body}");
    assert!(
        body.contains("xdns_queries_total{proto=\"udp\",qtype=\"A\"} 1"),
        "{body}"
    );
    assert!(
        body.contains("xdns_zone_serial{zone=\"example.com.\"} 5"),
        "{body}"
    );
}

#[test]
fn second_server_on_same_control_socket_fails() {
    let dir = TempDir::new("twice");
    let zone = dir.write("example.com.zone", &zone_text(1, 10));
    let srv = Server::start(&dir, &zone, "");
    let out = std::process::Command::new(bin())
        .args([
            "serve",
            "--listen",
            &format!("127.0.0.1:{}", free_port()),
            "--config",
        ])
        .arg(&srv.config)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("in use"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        srv.control.exists(),
        "the running server's socket must survive"
    );
}

#[test]
fn ipv6_and_wildcard_listeners_answer_from_the_queried_address() {
    let dir = TempDir::new("wild");
    let zone = dir.write("example.com.zone", &zone_text(1, 10));
    let port = free_port();
    let v4: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let v6: std::net::SocketAddr = format!("[::1]:{port}").parse().unwrap();
    let wild4: std::net::SocketAddr = format!("0.0.0.0:{port}").parse().unwrap();
    let srv = Server::start_on(&dir, &zone, "", v4, &[wild4, v6]);
    // Sent to 127.0.0.1 on a 0.0.0.0 socket: the answer must come from 127.0.0.1
    // (the client socket is connected and would ignore any other source).
    let r = udp(v4, &query(1, "www.example.com.", A, None), T).expect("answer via wildcard socket");
    assert_eq!(r.a, vec![Ipv4Addr::new(198, 18, 0, 10)]);
    let r = udp(v6, &query(2, "www.example.com.", A, None), T).expect("answer over IPv6");
    assert_eq!(r.id, 2);
    let r = tcp(v6, &query(3, "www.example.com.", A, None));
    assert_eq!(r.id, 3);
    drop(srv);
}

#[test]
fn pipelining_beyond_max_pipelined_still_answers_everything() {
    let dir = TempDir::new("pipeline");
    let zone = dir.write("example.com.zone", &zone_text(1, 10));
    let srv = Server::start(&dir, &zone, "[tcp]\nmax_pipelined = 2\n");
    let mut s = TcpStream::connect(srv.addr).unwrap();
    s.set_read_timeout(Some(T)).unwrap();
    // 50 queries (the big TXT ones fill the socket buffers faster) in one write.
    let qs: Vec<Vec<u8>> = (0..50u16).map(|i| query(100 + i, "big.example.com.", TXT, None)).collect();
    s.write_all(&tcp_frame(&qs)).unwrap();
    let mut ids: Vec<u16> = (0..50).map(|_| parse(tcp_read(&mut s).unwrap()).id).collect();
    ids.sort_unstable();
    assert_eq!(ids, (100..150).collect::<Vec<u16>>());
    assert_eq!(srv.stats()["queries"]["tcp"], 50);
}
