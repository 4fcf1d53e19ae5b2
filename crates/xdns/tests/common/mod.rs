//! Helpers shared by the integration tests: temp dirs, a running `xdns serve`, hand-built
//! queries and answers parsed with `domain`.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use domain::base::iana::Rcode;
use domain::base::Message;

/// The binary under test.
pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_xdns")
}

/// The repository's `tests/zones` directory.
pub fn zones_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/zones")
}

/// A temporary directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// A fresh directory named after `tag`.
    pub fn new(tag: &str) -> Self {
        let d = std::env::temp_dir().join(format!("xdns-it-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        TempDir(d)
    }
    /// Path of `name` inside the directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
    /// Write `text` to `name`.
    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.path(name);
        // Write then rename, so a reload never reads a half-written file.
        let tmp = self.path(&format!(".{name}.tmp"));
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, &p).unwrap();
        p
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A port free for both UDP and TCP on 127.0.0.1 (at the time of the call).
pub fn free_port() -> u16 {
    for _ in 0..100 {
        let u = UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = u.local_addr().unwrap().port();
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port");
}

/// A small zone for `example.com.` whose `www` A record is `198.18.0.<last>`.
pub fn zone_text(serial: u32, last: u8) -> String {
    format!(
        "$TTL 300\n\
         @ IN SOA ns1.example.com. hostmaster.example.com. {serial} 7200 3600 1209600 300\n\
         @ IN NS ns1\n\
         ns1 IN A 198.18.0.1\n\
         www IN A 198.18.0.{last}\n\
         big IN TXT \"{t}\" \"{t}\" \"{t}\" \"{t}\"\n",
        t = "x".repeat(200)
    )
}

/// A running `xdns serve`, killed on drop if still running.
pub struct Server {
    pub child: Child,
    pub addr: SocketAddr,
    pub control: PathBuf,
    pub config: PathBuf,
    pub log: PathBuf,
}

impl Server {
    /// Start with `extra` TOML appended to a config listening on a free port, serving the zone
    /// file `zone` as `example.com.`.
    pub fn start(dir: &TempDir, zone: &Path, extra: &str) -> Server {
        let port = free_port();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        Self::start_on(dir, zone, extra, addr, &[addr])
    }

    /// Start listening on `listen`; tests talk to `addr`.
    pub fn start_on(
        dir: &TempDir,
        zone: &Path,
        extra: &str,
        addr: SocketAddr,
        listen: &[SocketAddr],
    ) -> Server {
        let control = dir.path("control.sock");
        let listen: Vec<String> = listen.iter().map(|a| format!("\"{a}\"")).collect();
        let cfg = format!(
            "listen = [{}]\ncontrol = \"{}\"\nudp_workers = 2\n{extra}\n[[zone]]\nname = \"example.com.\"\nfile = \"{}\"\n",
            listen.join(", "),
            control.display(),
            zone.display()
        );
        let config = dir.write("xdns.toml", &cfg);
        let log = dir.path("xdns.log");
        let child = Command::new(bin())
            .args(["serve", "--config"])
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let mut s = Server {
            child,
            addr,
            control,
            config,
            log,
        };
        let t0 = Instant::now();
        // Started: the control socket is bound before the kernel path is attached (so it
        // exists before anything can answer), and "xdns started" is logged once every
        // listener serves.
        while !(s.control.exists() && s.log_text().contains("xdns started")) {
            if let Ok(Some(st)) = s.child.try_wait() {
                panic!("xdns exited early ({st}): {}", s.log_text());
            }
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "xdns did not start: {}",
                s.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        s
    }

    /// Everything the server logged so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Send a signal.
    pub fn signal(&self, sig: i32) {
        // SAFETY: kill(2) with our own child's pid.
        let r = unsafe { libc::kill(self.child.id() as i32, sig) };
        assert_eq!(r, 0);
    }

    /// Wait for exit (at most `limit`).
    pub fn wait(&mut self, limit: Duration) -> Option<ExitStatus> {
        let t0 = Instant::now();
        while t0.elapsed() < limit {
            if let Ok(Some(st)) = self.child.try_wait() {
                return Some(st);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// `xdns stats --control … --json`, parsed.
    pub fn stats(&self) -> serde_json::Value {
        let out = Command::new(bin())
            .args(["stats", "--json", "--control"])
            .arg(&self.control)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "stats failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Encode a presentation name as wire labels.
pub fn wire_name(name: &str) -> Vec<u8> {
    let mut out = Vec::new();
    for label in name
        .trim_end_matches('.')
        .split('.')
        .filter(|l| !l.is_empty())
    {
        out.push(label.len() as u8);
        out.extend_from_slice(label.as_bytes());
    }
    out.push(0);
    out
}

/// A query message: `id`, one question, optional EDNS OPT with `payload`.
pub fn query(id: u16, name: &str, qtype: u16, edns: Option<u16>) -> Vec<u8> {
    let mut q = Vec::new();
    q.extend_from_slice(&id.to_be_bytes());
    q.extend_from_slice(&[0x00, 0x00, 0, 1, 0, 0, 0, 0, 0, u8::from(edns.is_some())]);
    q.extend_from_slice(&wire_name(name));
    q.extend_from_slice(&qtype.to_be_bytes());
    q.extend_from_slice(&1u16.to_be_bytes());
    if let Some(p) = edns {
        q.extend_from_slice(&[0, 0, 41]);
        q.extend_from_slice(&p.to_be_bytes());
        q.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
    }
    q
}

/// What the tests look at in an answer.
#[derive(Debug)]
pub struct Answer {
    pub id: u16,
    pub rcode: Rcode,
    pub aa: bool,
    pub tc: bool,
    /// IPv4 addresses in the answer section.
    pub a: Vec<std::net::Ipv4Addr>,
    pub ancount: u16,
}

/// Parse a response with `domain`.
pub fn parse(bytes: Vec<u8>) -> Answer {
    let msg = Message::from_octets(bytes).expect("response shorter than a header");
    let h = msg.header();
    let counts = msg.header_counts();
    let mut a = Vec::new();
    for rr in msg
        .answer()
        .expect("answer section")
        .limit_to::<domain::rdata::A>()
    {
        a.push(rr.expect("A record").data().addr());
    }
    Answer {
        id: h.id(),
        rcode: h.rcode(),
        aa: h.aa(),
        tc: h.tc(),
        a,
        ancount: counts.ancount(),
    }
}

/// One UDP exchange (`None` on timeout). The socket is connected, so only an answer from
/// exactly `addr` is accepted.
pub fn udp(addr: SocketAddr, q: &[u8], timeout: Duration) -> Option<Answer> {
    let local = if addr.is_ipv6() {
        "[::1]:0"
    } else {
        "127.0.0.1:0"
    };
    let s = UdpSocket::bind(local).unwrap();
    s.set_read_timeout(Some(timeout)).unwrap();
    s.connect(addr).unwrap();
    s.send(q).unwrap();
    let mut buf = vec![0u8; 65535];
    let n = s.recv(&mut buf).ok()?;
    buf.truncate(n);
    Some(parse(buf))
}

/// Read one length-framed message from a TCP stream.
pub fn tcp_read(s: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let mut len = [0u8; 2];
    s.read_exact(&mut len)?;
    let mut buf = vec![0u8; usize::from(u16::from_be_bytes(len))];
    s.read_exact(&mut buf)?;
    Ok(buf)
}

/// Frame several messages into one buffer (for a single write).
pub fn tcp_frame(msgs: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for m in msgs {
        out.extend_from_slice(&(m.len() as u16).to_be_bytes());
        out.extend_from_slice(m);
    }
    out
}

/// One TCP exchange on a new connection.
pub fn tcp(addr: SocketAddr, q: &[u8]) -> Answer {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(&tcp_frame(&[q.to_vec()])).unwrap();
    parse(tcp_read(&mut s).unwrap())
}
