"""Issue 29, resolver half: one client's random-subdomain flood must not starve the others.

On the lab tree (tests/lab/tree.py) a flooding client, from an address in another /24 than the
good client's (added to both veths for this test), sends FLOOD_QPS queries per second for
random names under a zone whose only server never answers (`dead.lab.`: the blackhole) and
then under one whose server answers every name after tree.TARPIT_DELAY_MS (`tarpit.lab.`),
FLOOD_S seconds each. Meanwhile the good client asks fresh names under a healthy zone
(`<random>.wild.example.`, a wildcard: one upstream query each, the delegation cached) at
GOOD_QPS, each with its own ID on one socket, and a cached name (www.good.lab.) as often.

xdns runs with its defaults (fetch limits and fairness on) but for `max_pending`, scaled down
from 10,000 to MAX_PENDING: on this lab's 2 shared CPUs the generator tops out near 5,000 q/s
in Python, and 5,000 q/s held 0.8 s each (the upstream timeout) fills 4,000 places, below the
default; with 1,000 places the same flood exceeds the table as a 50,000 q/s flood exceeds the
default one. Without the fetch limits and fairness (the code before issue 29), this
scenario leaves the good client SERVFAIL answers from the full table. Checked:
- >= 99 % of the good client's fresh names are answered right within GOOD_TIMEOUT_S, under
  either flood;
- their median latency stays within 2x of its value measured just before, without a flood,
  plus P50_SLACK_MS (the baseline median is about half a millisecond, and two Python
  senders and three daemons share 2 CPUs: one scheduler tick would fail a bare 2x);
- the cached name is answered every time;
- the flood's queries that found no room are answered SERVFAIL at once, carrying the
  Extended DNS Error 22 (RFC 8914) when the query had EDNS; the counters say why.

The fairness rule alone is checked too: xdns again with the fetch limits off
(`fetches_per_server = 0`, `fetches_per_zone = 0`) under the dead zone's flood: the flooder's
/24 is held to half of the pending table (the rest of its queries get SERVFAIL at once, EDE 0
"client over its share"), and the good client keeps the same figures.

The same scenario runs against Unbound (defaults but for the lab's settings in tree.py); its
figures are printed beside xdns's and never asserted (issue 29: Unbound fails this way).
"""

from __future__ import annotations

import random
import selectors
import socket
import statistics
import threading
import time

import dns.edns
import dns.message
import dns.rcode
import pytest

from lab import Lab
from tree import Tree, start_unbound, start_xdns_resolver

FLOOD_QPS = 5000
FLOOD_S = 3.5
GOOD_QPS = 25
GOOD_TIMEOUT_S = 3.0
P50_SLACK_MS = 1.0
MAX_PENDING = 1000
WILD_A = "198.19.50.1"
CACHED = ("www.good.lab.", "198.19.10.1")


@pytest.fixture(scope="module")
def abuse_lab():
    with Lab(prefix="xda") as lab:
        tree = Tree(lab).start()
        # A second client /24: the flooder's. 198.18.0.0/15 has 512 /24s; the lab uses one.
        y = (lab.x + 1) % 512
        net = f"198.{18 + y // 256}.{y % 256}"
        lab.client_run(["ip", "addr", "add", f"{net}.100/24", "dev", lab.client_if])
        lab.server_run(["ip", "addr", "add", f"{net}.1/24", "dev", lab.server_if])
        yield lab, tree, f"{net}.100"


def _query(name: str, qid: int, edns: bool = True) -> bytes:
    q = dns.message.make_query(name, "A", use_edns=0 if edns else False, payload=1232)
    q.id = qid
    return q.to_wire()


class Flood(threading.Thread):
    """FLOOD_QPS random names under `zone` from `source` for `seconds`, half with EDNS;
    counts the replies by rcode and the SERVFAILs carrying EDE 22."""

    def __init__(self, lab, source: str, target: str, zone: str, seconds: float):
        super().__init__(daemon=True)
        self.sock = lab.client_socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((source, 0))
        self.sock.setblocking(False)
        self.target, self.seconds = target, seconds
        rnd = random.Random()
        n = int(FLOOD_QPS * seconds)
        self.packets = [_query(f"f{rnd.getrandbits(48):x}.{zone}", i & 0xFFFF, edns=i % 2 == 0)
                        for i in range(n)]
        self.sent = 0
        self.replies: dict[str, int] = {}
        self.ede22 = 0

    def _drain(self) -> None:
        for _ in range(1000):
            try:
                w = self.sock.recv(4096)
            except BlockingIOError:
                return
            try:
                m = dns.message.from_wire(w)
            except Exception:  # noqa: BLE001 - count it as unparsable
                self.replies["bad"] = self.replies.get("bad", 0) + 1
                continue
            rc = dns.rcode.to_text(m.rcode())
            self.replies[rc] = self.replies.get(rc, 0) + 1
            if any(o.otype == dns.edns.EDE and o.code == 22 for o in m.options):
                self.ede22 += 1

    def run(self) -> None:
        t0 = time.monotonic()
        end = t0 + self.seconds
        while self.sent < len(self.packets) and time.monotonic() < end + 1:
            due = min(len(self.packets), int((time.monotonic() - t0) * FLOOD_QPS) + 1)
            while self.sent < due:
                try:
                    self.sock.sendto(self.packets[self.sent], (self.target, 53))
                except (BlockingIOError, OSError):
                    pass
                self.sent += 1
            self._drain()
            time.sleep(0.001)
        stop = time.monotonic() + 1.0
        while time.monotonic() < stop:
            self._drain()
            time.sleep(0.01)
        self.sock.close()


def good_client(lab, target: str, seconds: float) -> dict:
    """GOOD_QPS fresh wildcard names and as many cached asks for `seconds`, on one socket;
    returns answered counts and the fresh names' latencies (ms)."""
    sock = lab.client_socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setblocking(False)
    sel = selectors.DefaultSelector()
    sel.register(sock, selectors.EVENT_READ)
    rnd = random.Random()
    pending: dict[int, tuple[str, str, float]] = {}  # id -> (kind, expected, sent at)
    lat: list[float] = []
    ok = {"fresh": 0, "cached": 0}
    asked = {"fresh": 0, "cached": 0}
    n = int(GOOD_QPS * seconds)
    ids = rnd.sample(range(65536), 2 * n)
    t0 = time.monotonic()
    i = 0
    try:
        while True:
            now = time.monotonic()
            if i < n and now >= t0 + i / GOOD_QPS:
                for kind, name, want in (("fresh", f"g{rnd.getrandbits(40):x}.wild.example.", WILD_A),
                                         ("cached", *CACHED)):
                    qid = ids[2 * i + (kind == "cached")]
                    sock.sendto(_query(name, qid), (target, 53))
                    pending[qid] = (kind, want, time.monotonic())
                    asked[kind] += 1
                i += 1
            if i >= n and (not pending or now > t0 + seconds + GOOD_TIMEOUT_S):
                break
            for _ in sel.select(0.002):
                while True:
                    try:
                        w = sock.recv(4096)
                    except BlockingIOError:
                        break
                    got = time.monotonic()
                    m = dns.message.from_wire(w)
                    p = pending.pop(m.id, None)
                    if p is None:
                        continue
                    kind, want, sent = p
                    if got - sent > GOOD_TIMEOUT_S:
                        continue
                    if m.rcode() == dns.rcode.NOERROR and \
                            [rd.to_text() for rr in m.answer for rd in rr] == [want]:
                        ok[kind] += 1
                        if kind == "fresh":
                            lat.append((got - sent) * 1000)
    finally:
        sock.close()
    return {"asked": asked, "ok": ok,
            "p50": statistics.median(lat) if lat else float("inf"),
            "p90": sorted(lat)[int(0.9 * (len(lat) - 1))] if lat else float("inf")}


def warm(lab, srv) -> None:
    """Cache the delegations the scenario walks (and the cached name)."""
    for name in ("www.good.lab.", "warm.wild.example.", "warm.tarpit.lab."):
        lab.udp(srv.addr4, _query(name, 1), timeout=3.0)
    lab.udp(srv.addr4, _query("warm.dead.lab.", 1), timeout=6.0)


def scenario(lab, srv, flood_src: str, zones=("dead.lab.", "tarpit.lab.")) -> dict:
    warm(lab, srv)
    out = {"base": good_client(lab, srv.addr4, 1.6)}
    for zone in zones:
        time.sleep(1.0)  # the previous flood's resolutions finish
        f = Flood(lab, flood_src, srv.addr4, zone, FLOOD_S)
        f.start()
        time.sleep(0.3)  # the flood is on before the good client starts
        g = good_client(lab, srv.addr4, FLOOD_S - 0.6)
        f.join(timeout=FLOOD_S + 10)
        g["flood"] = {"sent": f.sent, "replies": f.replies, "ede22": f.ede22}
        out[zone] = g
    return out


def line(kind: str, case: str, r: dict) -> str:
    a, o = r["asked"], r["ok"]
    s = (f"{kind:7} {case:12} fresh {o['fresh']:3}/{a['fresh']:3} "
         f"({100 * o['fresh'] / max(1, a['fresh']):5.1f}%) p50 {r['p50']:7.1f} ms "
         f"p90 {r['p90']:7.1f} ms   cached {o['cached']:3}/{a['cached']:3}")
    if "flood" in r:
        f = r["flood"]
        s += f"   flood sent {f['sent']} replies {f['replies']} EDE22 {f['ede22']}"
    return s


def test_flood_of_dead_and_slow_zones_does_not_starve_others(abuse_lab):
    lab, tree, flood_src = abuse_lab
    results = {}
    pending = f"max_pending = {MAX_PENDING}"
    runs = (
        ("xdns", start_xdns_resolver, {"extra": pending}, ("dead.lab.", "tarpit.lab.")),
        ("xdns-fair", start_xdns_resolver,
         {"extra": f"{pending}\nfetches_per_server = 0\nfetches_per_zone = 0"}, ("dead.lab.",)),
        ("unbound", start_unbound, {}, ("dead.lab.", "tarpit.lab.")),
    )
    for kind, start, kw, zones in runs:
        srv = start(lab, tree, name=f"{kind}-abuse", **kw)
        try:
            results[kind] = scenario(lab, srv, flood_src, zones)
            if kind.startswith("xdns"):
                results[kind]["stats"] = lab.xdns_stats(srv)["resolver"]
        finally:
            lab.stop(srv)
    print()
    for kind, r in results.items():
        for case in ("base", "dead.lab.", "tarpit.lab."):
            if case in r:
                print(line(kind, case, r[case]))
    for kind in ("xdns", "xdns-fair"):
        st = results[kind]["stats"]
        print(f"{kind} resolver counters:", {k: v for k, v in st.items() if v and k.startswith(
            ("quota", "fetch", "client_share", "pending_full", "coalesced", "servfails"))})

    for kind in ("xdns", "xdns-fair"):
        x = results[kind]
        base = x["base"]
        assert base["ok"]["fresh"] == base["asked"]["fresh"], line(kind, "base", base)
        for case in ("dead.lab.", "tarpit.lab."):
            if case not in x:
                continue
            r = x[case]
            desc = line(kind, case, r)
            assert r["ok"]["fresh"] >= 0.99 * r["asked"]["fresh"], desc
            assert r["p50"] <= 2 * base["p50"] + P50_SLACK_MS, f"{desc} (base p50 {base['p50']:.1f} ms)"
            assert r["ok"]["cached"] == r["asked"]["cached"], desc
    # Fairness alone: the flooder's /24 was refused beyond its share, nothing else.
    fair = results["xdns-fair"]["stats"]
    assert fair["client_share_servfails"] > 0 and fair["quota_failures"] == 0, fair
    x = results["xdns"]
    st = x["stats"]
    # The dead zone's flood was refused by its quota at once, with EDE 22 to EDNS queries.
    dead = x["dead.lab."]["flood"]
    assert dead["replies"].get("SERVFAIL", 0) >= 0.5 * dead["sent"], dead
    assert dead["ede22"] >= 0.2 * dead["sent"], dead
    assert st["quota_failures"] > 0, st
    assert st["quota_server_refusals"] + st["quota_zone_refusals"] > 0, st
