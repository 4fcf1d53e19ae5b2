"""Least privilege (issue 31): `xdns serve` started as root with `user = "nobody"` gives up root
once its sockets, XDP program and maps are open.

- every thread runs as nobody; the process holds no capability, except the XDP thread, which
  keeps CAP_NET_ADMIN, CAP_BPF and CAP_PERFMON (for the delivery guard and growing maps); no_new_privs and the seccomp deny
  list are on (`/proc/PID/task/*/status`);
- it answers from XDP and from userspace, reloads a changed zone, flushes the resolver, and a
  new process takes it over;
- the delivery guard can still move an interface to generic mode;
- a refused system call gives EPERM, it does not kill the server.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import dns.message
import pytest

from lab import DEFAULT_ZONES, XDNS_BIN, ZONES_DIR, Lab, Server

CAP_NET_ADMIN, CAP_PERFMON, CAP_BPF = 12, 38, 39


@pytest.fixture()
def plab():
    with Lab(prefix="xdl") as lab:
        os.chmod(lab.dir, 0o755)  # the daemon reads its configuration as nobody on reload
        yield lab


def start(lab: Lab, name: str, zones, xdp: str = "auto", client_xdp: bool = False, takeover: Server | None = None) -> Server:
    """xdns with `user = "nobody"`, its control socket in a directory of its own named xdns
    (the directory xdns may hand to its user, as /run/xdns)."""
    wd = lab.dir / name
    wd.mkdir(exist_ok=True)
    os.chmod(wd, 0o755)
    hints = wd / "root.hints"
    hints.write_text(". 3600 NS a.root.test.\na.root.test. 3600 A 198.18.255.1\n")
    extra = (f'user = "nobody"\n'
             f'\n[resolver]\nroot_hints = "{hints}"\nallow = ["198.18.0.0/15", "2001:db8::/32"]\n')
    if takeover is None:
        conf, a4, a6 = lab.write_xdns_config(zones, name, extra=extra, xdp=xdp)
        text = conf.read_text().replace(f'control = "{wd}/control.sock"', f'control = "{wd}/xdns/control.sock"')
        conf.write_text(text)
        os.chmod(conf, 0o644)
        if client_xdp:
            lab.client_xdp_pass()
        cmd = [XDNS_BIN, "serve", "--config", conf]
    else:
        conf, a4, a6 = takeover.extra["conf"], takeover.addr4, takeover.addr6
        cmd = [XDNS_BIN, "serve", "--config", conf, "--takeover"]
    proc = lab.server(cmd, name=name)
    srv = Server(name, a4, a6, proc, wd, lab.dir / f"{name}.stderr",
                 {"conf": conf, "control": conf.parent / "xdns" / "control.sock", "xdp": xdp})
    deadline = time.monotonic() + 20
    while "privileges dropped" not in srv.stderr() or "XDP thread keeps CAP_NET_ADMIN" not in srv.stderr():
        assert srv.alive() and time.monotonic() < deadline, srv.stderr()[-3000:]
        time.sleep(0.05)
    lab.wait_xdp_data(srv)
    return srv


def task_status(pid: int) -> list[dict]:
    out = []
    for t in Path(f"/proc/{pid}/task").iterdir():
        fields = {}
        for line in (t / "status").read_text().splitlines():
            k, _, v = line.partition(":")
            fields[k] = v.strip()
        fields["comm"] = (t / "comm").read_text().strip()
        out.append(fields)
    return out


def caps(hexmask: str) -> set[int]:
    m = int(hexmask, 16)
    return {i for i in range(64) if m >> i & 1}


def ask(lab: Lab, srv: Server, name: str = "www.example.com.") -> dns.message.Message | None:
    q = dns.message.make_query(name, "A", use_edns=True)
    w = lab.udp(srv.addr4, q.to_wire(), timeout=1.0)
    return dns.message.from_wire(w) if w else None


def test_runs_as_nobody_with_only_the_xdp_threads_capabilities(plab):
    zdir = plab.dir / "zones"
    zdir.mkdir()
    os.chmod(zdir, 0o755)
    for f in ("example.com.zone", "example.com.inc"):  # the zone $INCLUDEs the second
        (zdir / f).write_text((ZONES_DIR / f).read_text())
        os.chmod(zdir / f, 0o644)
    zone = zdir / "example.com.zone"
    zones = [("example.com.", zone)]
    srv = start(plab, "xdns-priv", zones)
    tasks = task_status(srv.proc.pid)
    assert tasks, "no threads"
    for t in tasks:
        assert t["Uid"].split()[:4] == ["65534"] * 4, (t["comm"], t["Uid"])
        assert t["NoNewPrivs"] == "1", (t["comm"], t["NoNewPrivs"])
        assert t["Seccomp"] == "2", (t["comm"], t["Seccomp"])
        eff = caps(t["CapEff"])
        if t["comm"] == "xdns-xdp":
            assert eff == {CAP_NET_ADMIN, CAP_BPF, CAP_PERFMON}, (t["comm"], eff)
        else:
            assert eff == set() and caps(t["CapPrm"]) == set(), (t["comm"], eff)
    assert any(t["comm"] == "xdns-xdp" for t in tasks)

    # answers from the kernel and from userspace (TCP)
    before = plab.xdns_stats(srv)["xdp"]["answered"]
    r = ask(plab, srv)
    assert r is not None and r.answer
    assert plab.xdns_stats(srv)["xdp"]["answered"] == before + 1
    wire = plab.tcp(srv.addr4, dns.message.make_query("www.example.com.", "A").to_wire())
    assert wire and dns.message.from_wire(wire).answer

    # a changed zone reloads (read as nobody), in userspace and in the kernel
    text = zone.read_text().replace("2024060101", "2024060102")
    zone.write_text(text + "\nprivtest 300 IN A 198.18.0.77\n")
    srv.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 10
    while True:
        r = ask(plab, srv, "privtest.example.com.")
        if r is not None and r.answer:
            break
        assert time.monotonic() < deadline, srv.stderr()[-2000:]
        time.sleep(0.1)
    assert plab.xdns_stats(srv)["reloads"]["failed"] == 0

    # the resolver's caches flush over the control socket
    p = subprocess.run([XDNS_BIN, "flush", "--control", srv.extra["control"]], capture_output=True, text=True, timeout=10)
    assert p.returncode == 0, p.stderr

    # a new process takes over (started as root, it drops too), and answers
    new = start(plab, "xdns-priv2", zones, takeover=srv)
    srv.proc.wait(timeout=20)
    r = ask(plab, new, "privtest.example.com.")
    assert r is not None and r.answer
    assert all(t["Uid"].split()[0] == "65534" for t in task_status(new.proc.pid))
    assert plab.stop(new) == 0
    assert not srv.extra["control"].exists(), "the control socket is removed at stop"


def test_the_delivery_guard_still_moves_an_interface_after_the_drop(plab):
    srv = start(plab, "xdns-privguard", DEFAULT_ZONES, xdp="auto", client_xdp=True)
    assert plab.xdns_stats(srv)["xdp_attached"] == {plab.server_if: "native"}
    plab.client_xdp_remove()
    deadline = time.monotonic() + 6
    while plab.xdns_stats(srv)["xdp_attached"] != {plab.server_if: "generic"}:
        assert time.monotonic() < deadline, srv.stderr()[-3000:]
        ask(plab, srv)
    r = ask(plab, srv)
    assert r is not None and r.answer
    assert "switching to generic mode failed" not in srv.stderr()
    assert plab.stop(srv) == 0
