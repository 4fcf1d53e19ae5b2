//! End to end (needs root): a veth pair between two network namespaces created for the test,
//! the program attached natively on the server side, and `kdig` in the client namespace
//! getting its answers from the kernel while nothing listens on port 53. The namespaces are
//! deleted at the end, also when the test fails.

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;

use common::*;
use xdns_bpf::data::compile_kernel_data;
use xdns_bpf::runtime::AttachMode;
use xdns_zone::{load_zone, ZoneSet, ZoneSource};

fn sh(args: &[&str]) -> std::process::Output {
    Command::new(args[0]).args(&args[1..]).output().expect(args[0])
}

fn ok(args: &[&str]) {
    let o = sh(args);
    assert!(o.status.success(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
}

/// Two namespaces and a veth pair; removed on drop.
struct Lab {
    srv: String,
    cli: String,
}

impl Lab {
    fn new() -> Self {
        let id = std::process::id();
        let lab = Lab { srv: format!("xdnsT{id}s"), cli: format!("xdnsT{id}c") };
        ok(&["ip", "netns", "add", &lab.srv]);
        ok(&["ip", "netns", "add", &lab.cli]);
        ok(&["ip", "link", "add", "xdT0", "netns", &lab.srv, "type", "veth", "peer", "name", "xdT1", "netns", &lab.cli]);
        for (ns, dev, v4, v6) in [(&lab.srv, "xdT0", "198.18.0.1/24", "2001:db8::1/64"), (&lab.cli, "xdT1", "198.18.0.2/24", "2001:db8::2/64")] {
            ok(&["ip", "-n", ns, "addr", "add", v4, "dev", dev]);
            ok(&["ip", "-n", ns, "addr", "add", v6, "dev", dev, "nodad"]);
            ok(&["ip", "-n", ns, "link", "set", dev, "up"]);
            ok(&["ip", "-n", ns, "link", "set", "lo", "up"]);
        }
        lab
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = sh(&["ip", "netns", "del", &self.srv]);
        let _ = sh(&["ip", "netns", "del", &self.cli]);
    }
}

/// Run `f` on a thread that has entered network namespace `ns` (setns is per thread).
fn in_netns<T: Send>(ns: &str, f: impl FnOnce() -> T + Send) -> T {
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

#[test]
fn kdig_answered_by_the_kernel() {
    if !have_root("kdig_answered_by_the_kernel") {
        return;
    }
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/zones");
    let z = load_zone(&ZoneSource { name: "example.com.".into(), file: dir.join("example.com.zone") }, None).unwrap();
    let mut zones = ZoneSet::default();
    zones.zones.insert(z.apex.clone(), Arc::new(z));
    let data = compile_kernel_data(&zones);

    let lab = Lab::new();
    let srv = lab.srv.clone();
    let cli = lab.cli.clone();
    // veth hands XDP_TX frames to the peer only if the peer has an XDP receive ring: attach the
    // same program on the client side with an empty listen set (it passes everything). GRO on
    // the peer did not enable that ring on this kernel (6.18).
    let mut peer_cfg = xdns_bpf::runtime::LoadConfig {
        listen: vec![],
        edns_payload: OUR_PAYLOAD,
        seed: None,
        capacity: xdns_bpf::runtime::Capacity { nodes: 16, answers: 16, bodies_s: 16, bodies_m: 16, bodies_l: 16 },
        resolver: None,
    };
    peer_cfg.seed = Some(1);
    let peer = in_netns(&cli, || {
        let mut p = xdns_bpf::runtime::XdpProgram::load(&peer_cfg).unwrap();
        p.attach("xdT1", AttachMode::Native).unwrap();
        p
    });
    in_netns(&srv, move || {
        let mut prog = load();
        prog.install(&data).unwrap();
        prog.attach("xdT0", AttachMode::Native).expect("native XDP on veth");
        // Nothing listens on port 53 in the server namespace: only XDP can answer.
        let mut outputs = Vec::new();
        for (server, q) in [
            ("198.18.0.1", vec!["www.example.com", "A"]),
            ("2001:db8::1", vec!["WwW.ExAmple.com", "AAAA"]),
            ("198.18.0.1", vec!["+dnssec", "nope.example.com", "A"]),
            ("198.18.0.1", vec!["+noedns", "big.example.com", "TXT"]),
        ] {
            let at = format!("@{server}");
            let mut args = vec!["ip", "netns", "exec", cli.as_str(), "kdig", at.as_str(), "+timeout=2", "+retry=0"];
            args.extend(q.iter().copied());
            let o = sh(&args);
            outputs.push(format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)));
        }
        let c = prog.counters().unwrap();
        let answered = c.iter().find(|x| x.0 == "answered").unwrap().1;
        println!("{}", outputs.join("\n----\n"));
        println!("counters: {:?}", c.into_iter().filter(|x| x.1 > 0).collect::<Vec<_>>());
        assert!(outputs[0].contains("198.18.0.10"), "A answer: {}", outputs[0]);
        assert!(outputs[1].contains("2001:db8::10"), "AAAA over IPv6: {}", outputs[1]);
        assert!(outputs[2].contains("NXDOMAIN"), "NXDOMAIN: {}", outputs[2]);
        assert!(outputs[3].contains("TC"), "truncated without EDNS: {}", outputs[3]);
        assert!(answered >= 4, "answered {answered}");
        prog.detach_all();
    });
    drop(peer);
    drop(lab);
}
