"""Restart without losing queries: `xdns serve --takeover` (see crates/xdns/src/takeover.rs).

Under continuous load from the client namespace (UDP over IPv4 and IPv6, TCP with one query per
connection, and dnsperf), xdns is restarted by takeover several times, with and without XDP:

- no query is lost: every query is sent exactly once (never retried) and must be answered
  within 2 s, and dnsperf must report 0 lost;
- every answer is correct: the same rcode, flags and sections as before the first restart;
- the old process exits 0 after each takeover, and the load overlapped each hand-over;
- with XDP, exactly one XDP program is on the interface after each restart, it is the new
  process's (a new program id, answering from the kernel), inside the same BPF link (the link
  id does not change: the program was swapped, never detached);
- a takeover with a broken configuration or zone fails with the file:line error and leaves
  the old server serving, untouched (same XDP program); so does a client that takes the
  sockets and goes away without completing;
- a SIGKILL of the new process after a takeover leaves no XDP program behind.

Each test runs in a lab of its own: one XDP program per interface.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import socket
import subprocess
import threading
import time

import dns.flags
import dns.message
import dns.rcode
import pytest

from lab import DEFAULT_ZONES, XDNS_BIN, ZONES_DIR, Lab

# (name, type): a mix the kernel answers (A, AAAA, NXDOMAIN with SOA, another zone) and one it
# may pass to userspace (a large TXT).
QUERIES = [
    ("www.example.com.", "A"),
    ("www.example.com.", "AAAA"),
    ("nope.example.com.", "A"),
    ("mail.example.com.", "A"),
    ("example.net.", "SOA"),
    ("txt.example.com.", "TXT"),
]
TIMEOUT = 2.0


@pytest.fixture
def rlab():
    """A lab per test: a failed test cannot leave a server or an XDP program to the next."""
    with Lab(prefix="xdl") as lab:
        yield lab


def _key(wire: bytes, ttl: bool = True):
    """What must not change across restarts: rcode, flags, and every section (with TTLs
    unless `ttl` is false: a resolver's answers age)."""
    m = dns.message.from_wire(wire)

    def sec(rrsets):
        if ttl:
            return [r.to_text() for r in rrsets]
        return [(r.name, r.rdtype, sorted(rd.to_text() for rd in r)) for r in rrsets]
    return (m.rcode(), m.flags & ~dns.flags.QR, sec(m.answer), sec(m.authority),
            sec(m.additional))


def _query(name: str, rtype: str) -> dns.message.Message:
    return dns.message.make_query(name, rtype, use_edns=True, payload=1232)


def expected_answers(lab: Lab, addr: str, queries=QUERIES, ttl: bool = True) -> dict:
    out = {}
    for name, rtype in queries:
        wire = lab.udp(addr, _query(name, rtype).to_wire(), timeout=2.0)
        assert wire is not None, f"{name} {rtype}: no answer before the restarts"
        out[(name, rtype)] = _key(wire, ttl)
    return out


class Load:
    """Steady queries from the client namespace, each sent once and awaited for TIMEOUT."""

    def __init__(self, lab: Lab, addr4: str, addr6: str, expected: dict,
                 nx_suffix: str | None = None):
        """`expected` maps (name, type) to the answer's key; with `nx_suffix`, every other UDP
        query is a fresh name under it (a recursive cache miss) that must be NXDOMAIN, and
        TTLs are not compared (a resolver's answers age)."""
        self.lab, self.expected, self.nx_suffix = lab, expected, nx_suffix
        self.ttl = nx_suffix is None
        self.queries = list(expected)
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.sent = {"udp": 0, "tcp": 0}
        self.answered: list[float] = []  # send times of answered queries
        self.lost: list[tuple] = []
        self.wrong: list[tuple] = []
        self.threads = [threading.Thread(target=self._udp, args=(a,), daemon=True)
                        for a in (addr4, addr4, addr6)]
        self.threads.append(threading.Thread(target=self._tcp, args=(addr4,), daemon=True))
        self.threads.append(threading.Thread(target=self._tcp, args=(addr6,), daemon=True))

    def __enter__(self) -> "Load":
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=10)

    def _check(self, proto, q, name, rtype, t0, wire, why="no answer"):
        with self.lock:
            if wire is None:
                self.lost.append((proto, name, rtype, round(t0, 3), why))
                return
            self.answered.append(t0)
            key = _key(wire, self.ttl)
            want = self.expected.get((name, rtype))
            ok = key[0] == dns.rcode.NXDOMAIN if want is None else key == want
            if wire[:2] != q.to_wire()[:2] or not ok:
                self.wrong.append((proto, name, rtype, key))

    def _udp(self, addr: str) -> None:
        fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
        with self.lab.client_socket(fam, socket.SOCK_DGRAM) as s:
            while not self.stop.is_set():
                name, rtype = random.choice(self.queries)
                if self.nx_suffix and random.random() < 0.5:
                    name = f"r{random.getrandbits(48):x}.{self.nx_suffix}"
                q = _query(name, rtype)
                q.id = random.getrandbits(16)
                wire_q = q.to_wire()
                t0 = time.monotonic()
                s.sendto(wire_q, (addr, 53))
                with self.lock:
                    self.sent["udp"] += 1
                wire = None
                while wire is None:
                    left = t0 + TIMEOUT - time.monotonic()
                    if left <= 0:
                        break
                    s.settimeout(left)
                    try:
                        data = s.recv(65535)
                    except socket.timeout:
                        break
                    if data[:2] == wire_q[:2]:
                        wire = data
                    # else: a late answer to an earlier query (already counted lost)
                self._check("udp", q, name, rtype, t0, wire)

    def _tcp(self, addr: str) -> None:
        while not self.stop.is_set():
            name, rtype = random.choice(self.queries)
            q = _query(name, rtype)
            t0 = time.monotonic()
            with self.lock:
                self.sent["tcp"] += 1
            why = "no answer"
            try:
                wire = self.lab.tcp(addr, q.to_wire(), timeout=TIMEOUT)
            except OSError as e:  # refused or reset: lost as well
                wire, why = None, str(e)
            self._check("tcp", q, name, rtype, t0, wire, why)
            time.sleep(0.005)

    def answered_between(self, t0: float, t1: float) -> int:
        with self.lock:
            return sum(1 for t in self.answered if t0 <= t <= t1)

    def assert_clean(self) -> None:
        total = sum(self.sent.values())
        assert not self.lost, f"{len(self.lost)} of {total} queries lost: {self.lost[:10]}"
        assert not self.wrong, f"{len(self.wrong)} wrong answers: {self.wrong[:5]}"
        assert len(self.answered) == total, (len(self.answered), self.sent)


def start_dnsperf(lab: Lab, addr: str, seconds: int, qps: int = 2000):
    """dnsperf at `qps` for `seconds` from the client namespace; `dnsperf_result` reads it."""
    data = lab.dir / "dnsperf.txt"
    data.write_text("".join(f"{n} {t}\n" for n, t in QUERIES))
    name = f"dnsperf-{random.getrandbits(32):08x}"
    proc = lab.client(["dnsperf", "-s", addr, "-d", data, "-l", seconds, "-Q", qps,
                       "-t", "3", "-c", "4"], name=name)
    return proc, lab.dir / f"{name}.stdout"


def dnsperf_result(perf) -> dict:
    proc, out = perf
    assert proc.wait(timeout=60) == 0, f"dnsperf failed: {out.read_text(errors='replace')}"
    text = out.read_text(errors="replace")
    got = {}
    for key in ("Queries sent", "Queries completed", "Queries lost"):
        m = re.search(rf"{key}:\s+(\d+)", text)
        assert m, f"dnsperf output without '{key}':\n{text}"
        got[key] = int(m.group(1))
    return got


def xdp_prog_ids(lab: Lab) -> list[int]:
    """Ids of the XDP programs on the server veth (bpftool net: any mode)."""
    out = lab.server_run(["bpftool", "-j", "net", "show", "dev", lab.server_if]).stdout
    ids = []
    for entry in json.loads(out):
        for x in entry.get("xdp", []):
            ids.append(x["id"])
    return ids


def xdp_link_ids(lab: Lab) -> list[int]:
    """Ids of the BPF links holding the XDP programs of the server veth."""
    progs = set(xdp_prog_ids(lab))
    out = subprocess.run(["bpftool", "-j", "link", "show"], capture_output=True, text=True,
                         check=True).stdout
    return [lk["id"] for lk in json.loads(out)
            if lk.get("type") == "xdp" and lk.get("prog_id") in progs]


def kernel_answered(lab: Lab, srv) -> int:
    return dict(lab.xdns_stats(srv).get("xdp", {})).get("answered", 0)


def takeover(lab: Lab, old, name: str, load: Load, conf=None):
    t0 = time.monotonic()
    new = lab.xdns_takeover(old, name, conf=conf)
    t1 = time.monotonic()
    assert old.proc.returncode == 0, f"{old.name} exited {old.proc.returncode}:\n" \
                                     f"{old.stderr()[-2000:]}"
    assert "handed over" in old.stderr(), old.stderr()[-2000:]
    assert "panicked" not in old.stderr() + new.stderr()
    # Queries sent while both processes were involved were answered (and are in the totals).
    time.sleep(0.3)
    assert load.answered_between(t0, t1) > 0, "the load did not overlap the hand-over"
    return new, t1 - t0


def assert_nothing_lost(perf, load, what: str, times: list) -> None:
    """dnsperf ran across every restart and lost nothing; the load client saw every answer."""
    assert perf[0].poll() is None, "dnsperf ended before the last restart: lengthen its run"
    load.assert_clean()
    res = dnsperf_result(perf)
    assert res["Queries lost"] == 0, res
    assert res["Queries completed"] == res["Queries sent"] > 5000, res
    print(f"{what}: {len(times)} restarts ({', '.join(f'{t:.2f}' for t in times)} s); "
          f"load {load.sent} all answered; dnsperf {res}")


def test_takeover_under_load_userspace(rlab):
    lab = rlab
    srv = lab.start_xdns(DEFAULT_ZONES, name="xdns-r0")
    expected = expected_answers(lab, srv.addr4)
    perf = start_dnsperf(lab, srv.addr4, seconds=12)
    times = []
    with Load(lab, srv.addr4, srv.addr6, expected) as load:
        time.sleep(1.0)
        for i in range(1, 5):
            srv, dt = takeover(lab, srv, f"xdns-r{i}", load)
            times.append(dt)
            time.sleep(0.7)
    assert_nothing_lost(perf, load, "userspace", times)
    assert lab.stop(srv) == 0


def xdp_section(lab: Lab, mode: str = "native") -> str:
    """The [xdp] table lab.write_xdns_config appends for `xdp=mode`."""
    return f'\n[xdp]\ninterfaces = ["{lab.server_if}"]\nmode = "{mode}"\n'


def test_takeover_under_load_xdp(rlab):
    """XDP to XDP twice (the program swapped inside the same link), then XDP off (the link
    goes with the old process: no program), then on again (attached afresh)."""
    lab = rlab
    srv = lab.start_xdns(DEFAULT_ZONES, name="xdns-x0", xdp="native")
    conf_xdp = srv.extra["conf"]
    text = conf_xdp.read_text()
    assert xdp_section(lab) in text, "lab.write_xdns_config changed: update xdp_section"
    conf_none = conf_xdp.with_name("xdns-noxdp.toml")
    conf_none.write_text(text.replace(xdp_section(lab), "\n"))
    expected = expected_answers(lab, srv.addr4)
    progs, links = xdp_prog_ids(lab), xdp_link_ids(lab)
    assert len(progs) == 1 and len(links) == 1, (progs, links)
    perf = start_dnsperf(lab, srv.addr4, seconds=14)
    times = []
    steps = [("xdns-x1", conf_xdp, 1), ("xdns-x2", conf_xdp, 1), ("xdns-x3", conf_none, 0),
             ("xdns-x4", conf_xdp, 1)]
    with Load(lab, srv.addr4, srv.addr6, expected) as load:
        time.sleep(1.0)
        for name, conf, want in steps:
            before = xdp_prog_ids(lab)
            srv, dt = takeover(lab, srv, name, load, conf=conf)
            times.append(dt)
            now = xdp_prog_ids(lab)
            assert len(now) == want, f"after {name}: XDP programs {now}, want {want}"
            if want and before:
                assert now != before, f"{name}: still the old program {before}"
                assert xdp_link_ids(lab) == links, "the link was replaced, not updated"
            if want:
                k0 = kernel_answered(lab, srv)
                deadline = time.monotonic() + 5
                while kernel_answered(lab, srv) <= k0 and time.monotonic() < deadline:
                    time.sleep(0.1)
                assert kernel_answered(lab, srv) > k0, f"{name}: its program answers nothing"
            time.sleep(0.5)
    assert_nothing_lost(perf, load, "xdp", times)
    assert lab.stop(srv) == 0
    assert xdp_prog_ids(lab) == [], "SIGTERM after takeovers left a program attached"


def test_broken_takeovers_leave_the_old_server_serving(rlab, tmp_path):
    lab = rlab
    srv = lab.start_xdns(DEFAULT_ZONES, name="xdns-b0", xdp="native")
    conf = srv.extra["conf"]
    expected = expected_answers(lab, srv.addr4)
    progs = xdp_prog_ids(lab)
    control = str(srv.extra["control"])

    def failed_takeover(name, bad_conf):
        p = subprocess.run(["ip", "netns", "exec", lab.server_ns, XDNS_BIN, "serve", "--config",
                            bad_conf, "--takeover"], capture_output=True, text=True, timeout=60)
        assert p.returncode == 1, f"{name}: exit {p.returncode}\n{p.stderr[-2000:]}"
        assert srv.alive(), f"{name}: the old server exited:\n{srv.stderr()[-2000:]}"
        assert xdp_prog_ids(lab) == progs, f"{name}: the XDP program changed"
        assert lab.xdns_stats(srv)["zones"], f"{name}: the control socket no longer answers"
        return p.stderr

    with Load(lab, srv.addr4, srv.addr6, expected) as load:
        # A configuration error: file and line, and the old server never contacted.
        bad = tmp_path / "bad.toml"
        lines = conf.read_text().splitlines()
        lines.insert(3, "udp_workers = \"many\"")
        bad.write_text("\n".join(lines) + "\n")
        err = failed_takeover("bad config", bad)
        assert f"{bad}:4:" in err, err[-2000:]
        assert "takeover" not in srv.stderr(), "a bad config reached the old server"

        # A zone error: file and line; the old server keeps its zones.
        zone = tmp_path / "example.com.zone"
        zone.write_text((ZONES_DIR / "example.com.zone").read_text() +
                        "broken\tIN\tA\t198.18.0.300\n")
        for f in ("example.com.inc",):
            (tmp_path / f).write_text((ZONES_DIR / f).read_text())
        nlines = len(zone.read_text().splitlines())
        bad_zone = tmp_path / "badzone.toml"
        bad_zone.write_text(conf.read_text().replace(str((ZONES_DIR / "example.com.zone")
                                                         .resolve()), str(zone)))
        assert str(zone) in bad_zone.read_text()
        err = failed_takeover("bad zone", bad_zone)
        assert f"{zone}:{nlines}:" in err, err[-2000:]
        assert "takeover abandoned" in err, err[-2000:]

        # A client that takes the sockets and links and goes away without "done": the old
        # server takes its links back and carries on.
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c:
            c.settimeout(10)
            c.connect(control)
            c.sendall(b"takeover\n")
            fds = []
            while True:
                msg, got, _, _ = socket.recv_fds(c, 1, 64)
                fds += got
                if msg == b".":
                    break
                assert msg == b"+", msg
            manifest = json.loads(c.makefile().readline())
            assert len(manifest["fds"]) == len(fds) > 0, manifest
            assert {"kind": "xdp", "interface": lab.server_if, "mode": "native"} \
                in manifest["fds"], manifest
            for fd in fds:
                os.close(fd)
        deadline = time.monotonic() + 5
        while "takeover abandoned" not in srv.stderr() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "takeover abandoned" in srv.stderr(), srv.stderr()[-2000:]
        assert srv.alive() and xdp_prog_ids(lab) == progs
        time.sleep(0.5)

        # And a good takeover still works after all that.
        srv, _ = takeover(lab, srv, "xdns-b1", load)
        assert len(xdp_prog_ids(lab)) == 1
        time.sleep(0.5)
    load.assert_clean()
    assert lab.stop(srv) == 0


def test_sigkill_after_takeover_leaves_no_xdp_program(rlab):
    lab = rlab
    # --takeover with no server running starts fresh.
    conf, a4, a6 = lab.write_xdns_config(DEFAULT_ZONES, name="xdns-k0", xdp="native")
    lab.client_xdp_pass()
    proc = lab.server([XDNS_BIN, "serve", "--config", conf, "--takeover"], name="xdns-k0")
    from lab import Server
    srv = Server("xdns-k0", a4, a6, proc, conf.parent, lab.dir / "xdns-k0.stderr",
                 {"conf": conf, "control": conf.parent / "control.sock", "xdp": "native"})
    lab.wait_answering(a4, "example.com.", proc)
    assert "starting fresh" in srv.stderr(), srv.stderr()[-2000:]
    assert len(xdp_prog_ids(lab)) == 1

    new = lab.xdns_takeover(srv, "xdns-k1")
    assert len(xdp_prog_ids(lab)) == 1
    assert lab.udp(a4, _query("www.example.com.", "A").to_wire()) is not None
    new.proc.send_signal(signal.SIGKILL)
    new.proc.wait(timeout=10)
    assert xdp_prog_ids(lab) == [], "the killed new process left its XDP program attached"
    assert xdp_link_ids(lab) == []
    assert lab.udp(a4, _query("www.example.com.", "A").to_wire(), timeout=1.0) is None, \
        "something still answers for the killed server"


def test_takeover_of_a_resolver_under_load(rlab):
    """A caching resolver with its kernel cache stage: cache hits (kernel and userspace) and
    fresh cache misses (resolutions under way at the hand-over) are all answered."""
    from tree import Tree, start_xdns_xdp_resolver
    lab = rlab
    tree = Tree(lab).start()
    srv = start_xdns_xdp_resolver(lab, tree, name="xdns-res0")
    queries = [("www.good.lab.", "A"), ("good.lab.", "MX"), ("www.good.lab.", "AAAA")]
    expected = expected_answers(lab, srv.addr4, queries, ttl=False)
    with Load(lab, srv.addr4, srv.addr6, expected, nx_suffix="good.lab.") as load:
        time.sleep(1.0)
        for i in (1, 2):
            srv, _ = takeover(lab, srv, f"xdns-res{i}", load)
            assert len(xdp_prog_ids(lab)) == 1
            time.sleep(0.7)
    load.assert_clean()
    print(f"resolver: 2 restarts; load {load.sent} all answered")
    assert lab.stop(srv) == 0
