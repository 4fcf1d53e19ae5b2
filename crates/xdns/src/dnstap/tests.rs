//! The writer against a file and against a Frame Streams reader on a unix socket.

use super::*;
use std::io::Read;
use std::os::unix::net::UnixListener;

fn settings(sink: Sink, queue: usize) -> Settings {
    Settings { sink, identity: "ns-test".into(), version: "xdns test".into(), log_queries: true, log_responses: true, queue, xdp: false }
}

fn msg(kind: Kind, wire: &[u8]) -> Message<'_> {
    Message {
        kind,
        proto: Proto::Udp,
        query_addr: Some("198.18.0.2:5353".parse().unwrap()),
        response_addr: Some("198.18.0.1:53".parse().unwrap()),
        wire,
        time: SystemTime::now(),
        query_time: None,
    }
}

/// Read a whole Frame Streams byte stream: its control frames and data frames, in order.
fn frames(mut b: &[u8]) -> Vec<Result<Vec<u8>, u32>> {
    let mut v = Vec::new();
    while b.len() >= 4 {
        let len = u32::from_be_bytes(b[..4].try_into().unwrap()) as usize;
        if len == 0 {
            let clen = u32::from_be_bytes(b[4..8].try_into().unwrap()) as usize;
            let (kind, _) = fstrm::parse_control(&b[8..8 + clen]).unwrap();
            v.push(Err(kind));
            b = &b[8 + clen..];
        } else {
            v.push(Ok(b[4..4 + len].to_vec()));
            b = &b[4 + len..];
        }
    }
    assert!(b.is_empty(), "trailing bytes");
    v
}

/// The DNS message inside a dnstap payload, and its type.
fn inner(payload: &[u8]) -> (u64, Vec<u8>) {
    let top = proto::decode(payload).unwrap();
    let m = top.iter().find_map(|(f, v)| match (f, v) {
        (14, proto::Value::Bytes(b)) => Some(b.clone()),
        _ => None,
    });
    let f = proto::decode(&m.unwrap()).unwrap();
    let kind = f.iter().find_map(|(n, v)| match (n, v) {
        (1, proto::Value::Varint(k)) => Some(*k),
        _ => None,
    });
    let wire = f.iter().find_map(|(n, v)| match (n, v) {
        (10 | 14, proto::Value::Bytes(b)) => Some(b.clone()),
        _ => None,
    });
    (kind.unwrap(), wire.unwrap())
}

#[test]
fn a_file_holds_start_the_messages_and_stop() {
    let dir = std::env::temp_dir().join(format!("xdns-dnstap-file-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("t.dnstap");
    let d = Dnstap::start(settings(Sink::File(path.clone()), 64)).unwrap();
    d.log(&msg(Kind::AuthQuery, b"query-1"));
    d.log(&msg(Kind::AuthResponse, b"response-1"));
    d.close(Duration::from_secs(5));
    let bytes = std::fs::read(&path).unwrap();
    let f = frames(&bytes);
    assert_eq!(f.len(), 4, "{f:?}");
    assert_eq!(f[0], Err(fstrm::START));
    assert_eq!(inner(f[1].as_ref().unwrap()), (1, b"query-1".to_vec()));
    assert_eq!(inner(f[2].as_ref().unwrap()), (2, b"response-1".to_vec()));
    assert_eq!(f[3], Err(fstrm::STOP));
    // the content type is in START
    assert!(bytes.windows(fstrm::CONTENT_TYPE.len()).any(|w| w == fstrm::CONTENT_TYPE));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn log_queries_and_log_responses_choose() {
    let dir = std::env::temp_dir().join(format!("xdns-dnstap-choose-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("t.dnstap");
    let mut s = settings(Sink::File(path.clone()), 64);
    s.log_queries = false;
    let d = Dnstap::start(s).unwrap();
    d.log(&msg(Kind::ClientQuery, b"q"));
    d.log(&msg(Kind::ClientResponse, b"r"));
    d.close(Duration::from_secs(5));
    let f = frames(&std::fs::read(&path).unwrap());
    assert_eq!(f.len(), 3, "{f:?}");
    assert_eq!(inner(f[1].as_ref().unwrap()), (6, b"r".to_vec()));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A reader's side of the handshake: READY in, ACCEPT out, START in; then everything up
/// to STOP, FINISH out. Returns the data frames.
fn serve_one(l: &UnixListener) -> Vec<Vec<u8>> {
    let (mut s, _) = l.accept().unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let (kind, types) = fstrm::read_control(&mut s).unwrap();
    assert_eq!(kind, fstrm::READY);
    assert_eq!(types, vec![fstrm::CONTENT_TYPE.to_vec()]);
    s.write_all(&fstrm::control(fstrm::ACCEPT, Some(fstrm::CONTENT_TYPE))).unwrap();
    let (kind, _) = fstrm::read_control(&mut s).unwrap();
    assert_eq!(kind, fstrm::START);
    let mut data = Vec::new();
    loop {
        let mut len = [0u8; 4];
        s.read_exact(&mut len).unwrap();
        let len = u32::from_be_bytes(len) as usize;
        if len == 0 {
            let mut cl = [0u8; 4];
            s.read_exact(&mut cl).unwrap();
            let mut body = vec![0; u32::from_be_bytes(cl) as usize];
            s.read_exact(&mut body).unwrap();
            assert_eq!(fstrm::parse_control(&body).unwrap().0, fstrm::STOP);
            s.write_all(&fstrm::control(fstrm::FINISH, None)).unwrap();
            return data;
        }
        let mut f = vec![0; len];
        s.read_exact(&mut f).unwrap();
        data.push(f);
    }
}

#[test]
fn a_socket_reader_gets_the_handshake_and_the_messages() {
    let dir = std::env::temp_dir().join(format!("xdns-dnstap-sock-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("r.sock");
    let l = UnixListener::bind(&path).unwrap();
    let reader = std::thread::spawn(move || serve_one(&l));
    let d = Dnstap::start(settings(Sink::Socket(path.clone()), 64)).unwrap();
    // the writer connects on its own; messages before the handshake may wait in the queue
    for i in 0..10u8 {
        d.log(&msg(Kind::AuthQuery, &[b'q', i]));
    }
    d.close(Duration::from_secs(5));
    let data = reader.join().unwrap();
    assert_eq!(data.len(), 10);
    for (i, f) in data.iter().enumerate() {
        assert_eq!(inner(f), (1, vec![b'q', i as u8]));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_writer_connects_again_when_the_reader_restarts() {
    let dir = std::env::temp_dir().join(format!("xdns-dnstap-restart-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("r.sock");
    // no reader yet: messages are dropped and counted, nothing blocks
    let d = Dnstap::start(settings(Sink::Socket(path.clone()), 64)).unwrap();
    let before = COUNTERS.dropped_no_reader.load(Relaxed);
    d.log(&msg(Kind::AuthQuery, b"lost"));
    let t = Instant::now();
    while COUNTERS.dropped_no_reader.load(Relaxed) == before && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(COUNTERS.dropped_no_reader.load(Relaxed) > before);
    // a reader comes, takes some messages, goes away without FINISH
    let l = UnixListener::bind(&path).unwrap();
    let (mut s, _) = l.accept().unwrap();
    let (kind, _) = fstrm::read_control(&mut s).unwrap();
    assert_eq!(kind, fstrm::READY);
    s.write_all(&fstrm::control(fstrm::ACCEPT, Some(fstrm::CONTENT_TYPE))).unwrap();
    assert_eq!(fstrm::read_control(&mut s).unwrap().0, fstrm::START);
    drop(s);
    drop(l);
    std::fs::remove_file(&path).unwrap();
    // messages now fail to write (counted) until a new reader listens
    d.log(&msg(Kind::AuthQuery, b"to nobody"));
    std::thread::sleep(Duration::from_millis(200));
    let l = UnixListener::bind(&path).unwrap();
    let reader = std::thread::spawn(move || serve_one(&l));
    // keep logging until the new reader has the writer connected, then one known message
    let t = Instant::now();
    let connected = COUNTERS.connections.load(Relaxed);
    while t.elapsed() < Duration::from_secs(10) {
        d.log(&msg(Kind::AuthQuery, b"probe"));
        std::thread::sleep(Duration::from_millis(50));
        if COUNTERS.connections.load(Relaxed) > connected {
            break;
        }
    }
    d.log(&msg(Kind::AuthResponse, b"after restart"));
    d.close(Duration::from_secs(5));
    let data = reader.join().unwrap();
    assert_eq!(data.last().map(|f| inner(f)), Some((2, b"after restart".to_vec())), "{} frames", data.len());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A reader that takes the handshake and then reads nothing: the writer blocks on the
/// socket, the queue fills, and `log` drops (counted) instead of waiting.
#[test]
fn a_reader_that_stops_reading_never_blocks_the_data_path() {
    let dir = std::env::temp_dir().join(format!("xdns-dnstap-stall-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("r.sock");
    let l = UnixListener::bind(&path).unwrap();
    let d = Dnstap::start(settings(Sink::Socket(path.clone()), 16)).unwrap();
    let (mut s, _) = l.accept().unwrap();
    let _ = fstrm::read_control(&mut s).unwrap();
    s.write_all(&fstrm::control(fstrm::ACCEPT, Some(fstrm::CONTENT_TYPE))).unwrap();
    let before = COUNTERS.dropped_queue_full.load(Relaxed);
    let wire = [0x55u8; 512];
    let t = Instant::now();
    for _ in 0..20_000 {
        d.log(&msg(Kind::AuthResponse, &wire));
    }
    let took = t.elapsed();
    assert!(took < Duration::from_secs(5), "logging 20000 messages took {took:?}");
    assert!(COUNTERS.dropped_queue_full.load(Relaxed) > before);
    drop(s);
    d.close(Duration::from_secs(5));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn settings_are_validated() {
    use crate::config::{parse, Overrides};
    let dir = std::env::temp_dir();
    let p = dir.join("x.toml");
    let ok = parse("[dnstap]\nfile = \"t.dnstap\"\nidentity = \"ns1\"\n", &p, &Overrides::default()).unwrap();
    let s = ok.dnstap.unwrap();
    assert_eq!(s.sink, Sink::File(dir.join("t.dnstap")));
    assert_eq!((s.identity.as_str(), s.log_queries, s.log_responses, s.queue), ("ns1", true, true, DEFAULT_QUEUE));
    assert!(s.version.starts_with("xdns "));
    assert!(!s.xdp, "dnstap from XDP is off unless asked");
    let on = parse("[dnstap]\nfile = \"t.dnstap\"\nxdp = true\n", &p, &Overrides::default()).unwrap();
    assert!(on.dnstap.unwrap().xdp);
    let errs = parse("[dnstap]\nfile = \"t.dnstap\"\n\nxdp = \"yes\"\n", &p, &Overrides::default()).unwrap_err();
    assert_eq!(errs[0].line, Some(4), "{errs:?}");
    assert!(errs[0].reason.contains("bool"), "{errs:?}");
    let bad = [
        ("[dnstap]\nidentity = \"x\"\n", "needs `socket`"),
        ("[dnstap]\nsocket = \"/run/a\"\nfile = \"/tmp/b\"\n", "both"),
        ("[dnstap]\nfile = \"/nonexistent-dir/x\"\n", "directory does not exist"),
        ("[dnstap]\nsocket = \"\"\n", "must not be empty"),
        ("\n[dnstap]\nsocket = \"/run/x\"\nlog_queries = false\nlog_responses = false\n", "nothing to log"),
        ("[dnstap]\nsocket = \"/run/x\"\nqueue = 0\n", "queue 0"),
        ("[dnstap]\nsocket = \"/run/x\"\nsample = 2\n", "unknown field"),
    ];
    for (text, want) in bad {
        let errs = parse(text, &p, &Overrides::default()).unwrap_err();
        let all: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
        assert!(all.iter().any(|e| e.contains(want) && e.starts_with(&format!("{}:", p.display()))), "{text:?}: {all:?}");
    }
    let long = format!("[dnstap]\nsocket = \"/{}\"\n", "a".repeat(120));
    assert!(parse(&long, &p, &Overrides::default()).unwrap_err()[0].reason.contains("longer than"));
    // the line of the problem
    let errs = parse("\n\n[dnstap]\nsocket = \"/run/x\"\nqueue = -1\n", &p, &Overrides::default()).unwrap_err();
    assert_eq!(errs[0].line, Some(5), "{errs:?}");
}
