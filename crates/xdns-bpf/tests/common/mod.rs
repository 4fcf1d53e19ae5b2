//! Shared by the root tests: frames built in code, checksums recomputed independently of the
//! kernel, DNS queries, and the program loaded with the lab addresses.
#![allow(dead_code)]

use std::net::SocketAddr;

use xdns_bpf::data::{AnswerEntry, KernelData, Kind, NodeEntry};
use xdns_bpf::runtime::{Capacity, LoadConfig, XdpProgram};
use xdns_wire::body::BodyWriter;

pub const SERVER_V4: [u8; 4] = [198, 18, 0, 1];
pub const CLIENT_V4: [u8; 4] = [198, 18, 0, 2];
pub const SERVER_V6: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
pub const CLIENT_V6: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
pub const SERVER_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
pub const CLIENT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];
pub const OUR_PAYLOAD: u16 = 1232;

/// Every test that loads BPF programs calls this first. Without root it fails, saying so:
/// a root test that returned early would pass without testing anything, and CI (which runs
/// as root) must never count a test that did not run. Leave them out by name instead
/// (`cargo test -- --skip ...`) where root is not available.
pub fn require_root(test: &str) {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    assert!(euid == 0, "{test}: needs root (CAP_BPF, CAP_NET_ADMIN); running as uid {euid}, so it fails rather than pass untested");
}

/// Keep this test's thread on the CPU it runs on now. The question memo, the cache hints and
/// the reply memo are per CPU, and BPF_PROG_TEST_RUN runs on the caller's CPU: a test that
/// expects one ask to find what an earlier ask left must make both on one CPU, or the
/// scheduler moving its thread (on a busy machine) fails it.
pub fn stay_on_one_cpu() {
    // SAFETY: sched_getcpu has no preconditions; the set is zeroed, gets one bit, and is
    // passed with its own size for the calling thread (pid 0).
    unsafe {
        let cpu = libc::sched_getcpu();
        assert!(cpu >= 0, "sched_getcpu");
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu as usize, &mut set);
        assert_eq!(libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set), 0, "sched_setaffinity");
    }
}

/// The program listening on the lab addresses, port 53, with a fixed seed.
pub fn load() -> XdpProgram {
    load_with(None, None)
}

/// As [`load`], with the cache stage and the guard stage as given.
pub fn load_with(resolver: Option<xdns_bpf::runtime::ResolverStage>, guard: Option<xdns_bpf::guard::GuardStage>) -> XdpProgram {
    let listen: Vec<SocketAddr> = vec!["198.18.0.1:53".parse().unwrap(), "[2001:db8::1]:53".parse().unwrap()];
    let cfg = LoadConfig {
        listen,
        edns_payload: OUR_PAYLOAD,
        seed: Some(0x5eed_0123_4567_89ab),
        capacity: Capacity { nodes: 4096, answers: 4096, bodies_m: 4096, bodies_l: 1024, table_vals: 0, table_bytes: 0 },
        resolver,
        guard,
        kit: None,
    };
    XdpProgram::load(&cfg).expect("load (verifier)")
}

/// Layer 2-4 of one frame.
#[derive(Clone, Debug)]
pub struct Net {
    pub v6: bool,
    /// (TPID, TCI) of one VLAN tag.
    pub vlan: Option<(u16, u16)>,
    /// IPv4 options (multiple of 4 bytes).
    pub ip_opts: Vec<u8>,
    pub src_mac: [u8; 6],
    pub dst_mac: [u8; 6],
    pub src: Vec<u8>,
    pub dst: Vec<u8>,
    pub sport: u16,
    pub dport: u16,
    pub ttl: u8,
    /// IPv4 flags+fragment offset field.
    pub frag: u16,
    /// IPv6 next header (17 = UDP); anything else is placed before a UDP extension chain.
    pub v6_ext: Option<u8>,
    /// IP protocol (17 = UDP).
    pub proto: u8,
}

impl Net {
    pub fn v4() -> Self {
        Net {
            v6: false,
            vlan: None,
            ip_opts: vec![],
            src_mac: CLIENT_MAC,
            dst_mac: SERVER_MAC,
            src: CLIENT_V4.to_vec(),
            dst: SERVER_V4.to_vec(),
            sport: 40000,
            dport: 53,
            ttl: 63,
            frag: 0x4000,
            v6_ext: None,
            proto: 17,
        }
    }

    pub fn v6() -> Self {
        Net { v6: true, src: CLIENT_V6.to_vec(), dst: SERVER_V6.to_vec(), ..Net::v4() }
    }

    /// The reply's headers as the kernel must write them.
    pub fn reply(&self) -> Self {
        Net {
            src_mac: self.dst_mac,
            dst_mac: self.src_mac,
            src: self.dst.clone(),
            dst: self.src.clone(),
            sport: self.dport,
            dport: self.sport,
            ttl: 64,
            ip_opts: vec![],
            ..self.clone()
        }
    }
}

/// Folded one's-complement sum of big-endian words.
pub fn sum16(data: &[u8], mut s: u32) -> u32 {
    for c in data.chunks(2) {
        s += u32::from(c[0]) << 8 | u32::from(*c.get(1).unwrap_or(&0));
    }
    s
}

pub fn fold(mut s: u32) -> u16 {
    while s >> 16 != 0 {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

fn udp_csum(net: &Net, udp: &[u8]) -> u16 {
    let mut s = sum16(&net.src, 0);
    s = sum16(&net.dst, s);
    s += 17 + udp.len() as u32;
    s = sum16(udp, s);
    match !fold(s) {
        0 => 0xffff,
        c => c,
    }
}

/// A complete Ethernet frame carrying `payload` over UDP, checksums correct.
pub fn frame(net: &Net, payload: &[u8]) -> Vec<u8> {
    let mut udp = Vec::new();
    udp.extend_from_slice(&net.sport.to_be_bytes());
    udp.extend_from_slice(&net.dport.to_be_bytes());
    udp.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    udp.extend_from_slice(&[0, 0]);
    udp.extend_from_slice(payload);
    let c = udp_csum(net, &udp);
    udp[6..8].copy_from_slice(&c.to_be_bytes());

    let mut f = Vec::new();
    f.extend_from_slice(&net.dst_mac);
    f.extend_from_slice(&net.src_mac);
    if let Some((tpid, tci)) = net.vlan {
        f.extend_from_slice(&tpid.to_be_bytes());
        f.extend_from_slice(&tci.to_be_bytes());
    }
    if !net.v6 {
        f.extend_from_slice(&[0x08, 0x00]);
        let ihl = 5 + net.ip_opts.len() / 4;
        let mut ip = vec![0x40 | ihl as u8, 0];
        ip.extend_from_slice(&((ihl * 4 + udp.len()) as u16).to_be_bytes());
        ip.extend_from_slice(&[0x12, 0x34]);
        ip.extend_from_slice(&net.frag.to_be_bytes());
        ip.extend_from_slice(&[net.ttl, net.proto, 0, 0]);
        ip.extend_from_slice(&net.src);
        ip.extend_from_slice(&net.dst);
        ip.extend_from_slice(&net.ip_opts);
        let c = !fold(sum16(&ip, 0));
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        f.extend_from_slice(&ip);
        f.extend_from_slice(&udp);
    } else {
        f.extend_from_slice(&[0x86, 0xdd]);
        let mut ext = Vec::new();
        let first = match net.v6_ext {
            Some(h) => {
                ext.extend_from_slice(&[net.proto, 0, 1, 4, 0, 0, 0, 0]);
                h
            }
            None => net.proto,
        };
        f.extend_from_slice(&[0x60, 0, 0, 0]);
        f.extend_from_slice(&((ext.len() + udp.len()) as u16).to_be_bytes());
        f.extend_from_slice(&[first, net.ttl]);
        f.extend_from_slice(&net.src);
        f.extend_from_slice(&net.dst);
        f.extend_from_slice(&ext);
        f.extend_from_slice(&udp);
    }
    f
}

/// Recompute the IPv4 header and UDP checksums of a frame; true if both verify.
pub fn checksums_ok(f: &[u8]) -> bool {
    let mut l3 = 14;
    let mut et = u16::from_be_bytes([f[12], f[13]]);
    if et == 0x8100 || et == 0x88a8 {
        et = u16::from_be_bytes([f[16], f[17]]);
        l3 = 18;
    }
    let (src, dst, udp) = if et == 0x0800 {
        let ihl = usize::from(f[l3] & 0xf) * 4;
        if fold(sum16(&f[l3..l3 + ihl], 0)) != 0xffff {
            return false;
        }
        (&f[l3 + 12..l3 + 16], &f[l3 + 16..l3 + 20], &f[l3 + ihl..])
    } else {
        (&f[l3 + 8..l3 + 24], &f[l3 + 24..l3 + 40], &f[l3 + 40..])
    };
    let ulen = usize::from(u16::from_be_bytes([udp[4], udp[5]]));
    if ulen != udp.len() {
        return false;
    }
    let mut s = sum16(src, 0);
    s = sum16(dst, s);
    s += 17 + ulen as u32;
    s = sum16(udp, s);
    fold(s) == 0xffff
}

/// The DNS payload of a UDP frame.
pub fn dns_of(f: &[u8]) -> &[u8] {
    let mut l3 = 14;
    let mut et = u16::from_be_bytes([f[12], f[13]]);
    if et == 0x8100 || et == 0x88a8 {
        et = u16::from_be_bytes([f[16], f[17]]);
        l3 = 18;
    }
    let l4 = if et == 0x0800 { l3 + usize::from(f[l3] & 0xf) * 4 } else { l3 + 40 };
    &f[l4 + 8..]
}

/// EDNS of a query: (payload, DO, version, raw options).
#[derive(Clone, Debug)]
pub struct Opt {
    pub payload: u16,
    pub dnssec_ok: bool,
    pub version: u8,
    pub options: Vec<u8>,
}

impl Opt {
    pub fn new(payload: u16, dnssec_ok: bool) -> Option<Self> {
        Some(Opt { payload, dnssec_ok, version: 0, options: vec![] })
    }

    pub fn bytes(&self) -> Vec<u8> {
        let mut b = vec![0, 0, 41];
        b.extend_from_slice(&self.payload.to_be_bytes());
        b.extend_from_slice(&[0, self.version, if self.dnssec_ok { 0x80 } else { 0 }, 0]);
        b.extend_from_slice(&(self.options.len() as u16).to_be_bytes());
        b.extend_from_slice(&self.options);
        b
    }
}

/// Wire form of a presentation name, case kept (`www.Example.com`).
pub fn wire(name: &str) -> Vec<u8> {
    let mut out = Vec::new();
    for l in name.split('.').filter(|l| !l.is_empty()) {
        out.push(l.len() as u8);
        out.extend_from_slice(l.as_bytes());
    }
    out.push(0);
    out
}

/// A query: ID 0xbeef, RD set, one question, optional OPT.
pub fn query(qname: &[u8], qtype: u16, opt: Option<Opt>) -> Vec<u8> {
    let mut m = vec![0xbe, 0xef, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, u8::from(opt.is_some())];
    m.extend_from_slice(qname);
    m.extend_from_slice(&qtype.to_be_bytes());
    m.extend_from_slice(&[0, 1]);
    if let Some(o) = opt {
        m.extend_from_slice(&o.bytes());
    }
    m
}

/// Run `f` once: (XDP action, output frame, names of the verdict counters that moved).
pub fn verdict(prog: &XdpProgram, f: &[u8]) -> (u32, Vec<u8>, Vec<String>) {
    let before = prog.counters().unwrap();
    let (act, out) = prog.test_run(f).unwrap();
    let after = prog.counters().unwrap();
    let moved = before.iter().zip(&after).filter(|(b, a)| a.1 != b.1).map(|(_, a)| a.0.clone()).collect();
    (act, out, moved)
}

/// A served zone, example.com, with www A 192.0.2.1: names under it are answered
/// authoritatively, every other name is under no zone.
pub fn www_example_com() -> KernelData {
    let apex = wire("example.com");
    let www = wire("www.example.com");
    let mut w = BodyWriter::new(&www).unwrap();
    w.set_aa(true);
    w.write_rr(&www, true, 1, 300, &[192, 0, 2, 1]).unwrap();
    KernelData {
        nodes: vec![
            NodeEntry { name: apex.clone(), apex: apex.clone(), cut: None, wildcard: false },
            NodeEntry { name: www.clone(), apex, cut: None, wildcard: false },
        ],
        answers: vec![AnswerEntry { base: www, kind: Kind::Type(1), body: w.finish() }],
    }
}

/// Run `f` on a thread that has entered network namespace `ns` (setns is per thread).
pub fn in_netns<T: Send>(ns: &str, f: impl FnOnce() -> T + Send) -> T {
    let path = format!("/run/netns/{ns}");
    std::thread::scope(|s| {
        s.spawn(|| {
            let file = std::fs::File::open(&path).expect("netns file");
            use std::os::fd::AsRawFd;
            // SAFETY: `file` is an open netns file; setns changes only this thread's namespace.
            let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
            f()
        })
        .join()
        .unwrap()
    })
}

/// Delete the namespaces `prefix<pid>...` left by a test process that no longer runs (one
/// killed before its namespaces' `Drop`, e.g. by a timeout). Those of live processes, this one
/// and a concurrent run's, are kept.
pub fn sweep_stale_netns(prefix: &str) {
    let Ok(dir) = std::fs::read_dir("/run/netns") else { return };
    for name in dir.flatten().map(|e| e.file_name().to_string_lossy().into_owned()) {
        let Some(rest) = name.strip_prefix(prefix) else { continue };
        let pid: String = rest.chars().take_while(char::is_ascii_digit).collect();
        if !pid.is_empty() && !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::process::Command::new("ip").args(["netns", "del", &name]).output();
        }
    }
}
