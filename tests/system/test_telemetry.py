"""Latency telemetry (issue 27) in the lab: `xdns probe` against xdns (kernel and userspace
paths), against Knot DNS (which knows nothing of option 65050: answered, never stamped) and
against the no-op reflector (`--baseline`); rules edited live and `--takeover` while probes
flow lose no query.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time

import pytest

from lab import DEFAULT_ZONES, XDNS_BIN, Lab, run


@pytest.fixture(scope="module")
def tlab():
    with Lab(prefix="xdl") as lab:
        yield lab


TEL = '\n[telemetry]\nrules = ["qname=example.com"]\n'


def probe(lab: Lab, addr: str, *args: str, port: int = 53) -> dict:
    p = lab.client_run([str(XDNS_BIN), "probe", f"{addr}:{port}", "--json", *args], timeout=60)
    return json.loads(p.stdout)


def control(srv, *args: str) -> str:
    p = run([str(XDNS_BIN), "telemetry", "--control", str(srv.extra["control"]), *args], timeout=10)
    return p.stdout.strip()


def test_probe_kernel_path_rules_live(tlab):
    srv = tlab.start_xdns(DEFAULT_ZONES, name="xdns-tel-k", xdp="native", extra=TEL)
    assert control(srv, "list") == "ok 1; 1: qname=example.com."
    r = probe(tlab, srv.addr4, "--rate", "200", "--duration", "1", "--query", "www.example.com A")
    assert r["sent"] == 200 and r["answered"] == 200, r
    assert r["stamped"] == 200, f"every answer carries the server's times: {r}"
    assert 0 < r["server"]["p50"] < 1_000_000, r
    assert r["network"]["p50"] > 0
    st = tlab.xdns_stats(srv)
    assert st["latency"]["kernel_auth"]["count"] >= 200, st["latency"]
    assert st["telemetry"]["probes"] >= 200
    assert st["telemetry"]["rx_xdp_ktime"] >= 200
    # a name no rule selects: answered, not stamped
    r = probe(tlab, srv.addr4, "--rate", "100", "--duration", "0.5", "--query", "www.example.net A")
    assert (r["answered"], r["stamped"]) == (50, 0), r
    # rules removed live: nothing stamped; added back for every path: stamped again
    assert control(srv, "del", "all") == "ok 0"
    r = probe(tlab, srv.addr4, "--rate", "100", "--duration", "0.5", "--query", "www.example.com A")
    assert (r["answered"], r["stamped"]) == (50, 0), r
    assert control(srv, "add", "all").startswith("ok 1")
    r = probe(tlab, srv.addr4, "--rate", "100", "--duration", "0.5", "--query", "www.example.net A")
    assert (r["answered"], r["stamped"]) == (50, 50), r
    # text output: the table and the chart
    p = tlab.client_run([str(XDNS_BIN), "probe", srv.addr4, "--rate", "100", "--duration", "0.3",
                         "--query", "www.example.com A"], timeout=30)
    assert "sent 30 answered 30 lost 0 stamped 30" in p.stdout, p.stdout
    assert "server histogram" in p.stdout
    tlab.stop(srv)


def test_probe_userspace_path_and_metrics(tlab):
    srv = tlab.start_xdns(DEFAULT_ZONES, name="xdns-tel-u",
                          extra=TEL.replace("qname=example.com", "path=user-auth"))
    r = probe(tlab, srv.addr4, "--rate", "200", "--duration", "1", "--query", "www.example.com A")
    assert (r["sent"], r["answered"], r["stamped"]) == (200, 200, 200), r
    assert 0 < r["server"]["p50"] < 10_000_000, r
    st = tlab.xdns_stats(srv)
    lat = st["latency"]["user_auth"]
    # the probes and the lab's readiness queries (SOA), all under path=user-auth
    assert lat["count"] >= 200 and lat["p50_ns"] > 0, lat
    assert st["telemetry"]["rx_software"] + st["telemetry"]["rx_hardware"] == lat["count"], st["telemetry"]
    out = run([str(XDNS_BIN), "stats", "--control", str(srv.extra["control"])], timeout=10).stdout
    assert "latency.user_auth" in out and "p99.9" in out, out
    tlab.stop(srv)


def tel_counts(lab: Lab, srv) -> tuple[int, dict]:
    st = lab.xdns_stats(srv)
    return st["latency"]["user_auth"]["count"], st["telemetry"]


def kernel_at_least(release: str, want: tuple[int, int]) -> bool:
    """Is a kernel release string ("6.18.44-fc") at least `want` (major, minor)?"""
    parts = re.split(r"[^0-9]+", release)
    try:
        return (int(parts[0]), int(parts[1])) >= want
    except (ValueError, IndexError):
        return False


def test_kernel_release_compared():
    assert kernel_at_least("6.18.44-fc-v669", (6, 13))
    assert kernel_at_least("6.13.0", (6, 13))
    assert not kernel_at_least("6.1.0-28-amd64", (6, 13))
    assert not kernel_at_least("garbage", (6, 13))


# From Linux 6.13 (SCM_TS_OPT_ID) the workers take their transmit times from the error
# queue; before it, and with XDNS_TEL_TX=read (what an older kernel gets, forced), they read
# the send time just before sendmmsg.
ERRQ_KERNEL = kernel_at_least(os.uname().release, (6, 13))


@pytest.mark.parametrize("tx_env,clock", [
    (None, "tx_software" if ERRQ_KERNEL else "tx_read"),
    ("read", "tx_read"),
], ids=["this-kernel", "send-time-read"])
def test_userspace_transmit_stamps_from_the_error_queue(tlab, monkeypatch, tx_env, clock):
    """Every userspace answer a rule times takes its transmit time by one clock: on Linux
    6.13 and later the kernel's software transmit stamp read back from the socket's error
    queue (`tx_software`); on an older kernel, or with XDNS_TEL_TX=read, the send time read
    before `sendmmsg` (`tx_read`). None lost, and the histogram holds exactly the answers
    timed. Rules removed: nothing more is timed."""
    if tx_env is None:
        monkeypatch.delenv("XDNS_TEL_TX", raising=False)
    else:
        monkeypatch.setenv("XDNS_TEL_TX", tx_env)
    srv = tlab.start_xdns(DEFAULT_ZONES, name=f"xdns-tel-tx-{tx_env or 'k'}",
                          extra=TEL.replace("qname=example.com", "path=user-auth"))
    monkeypatch.delenv("XDNS_TEL_TX", raising=False)
    n0, t0 = tel_counts(tlab, srv)
    r = probe(tlab, srv.addr4, "--rate", "300", "--duration", "1", "--query", "www.example.com A")
    assert (r["sent"], r["answered"], r["stamped"]) == (300, 300, 300), r
    # the stamps of the last answers may be read on the worker's next turn (its read timeout)
    deadline = time.monotonic() + 5
    while True:
        n1, t1 = tel_counts(tlab, srv)
        if n1 - n0 >= 300 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    tx = ("tx_software", "tx_hardware", "tx_read", "tx_lost")
    d = {k: t1[k] - t0[k] for k in (*tx, "rx_software")}
    assert n1 - n0 == 300, (n1 - n0, d)
    want = {k: 0 for k in tx} | {clock: 300, "rx_software": 300}
    assert d == want, (os.uname().release, d)
    # every timed answer since the start, the lab's readiness queries too, by one tx clock
    assert t1[clock] == n1 and sum(t1[k] for k in tx) == n1, t1
    # the server time of a veth answer, socket queues included: under 10 ms
    st = tlab.xdns_stats(srv)
    assert 0 < st["latency"]["user_auth"]["p50_ns"] < 10_000_000, st["latency"]["user_auth"]
    assert control(srv, "del", "all") == "ok 0"
    r = probe(tlab, srv.addr4, "--rate", "100", "--duration", "0.5", "--query", "www.example.com A")
    assert (r["answered"], r["stamped"]) == (50, 0), r
    time.sleep(0.5)
    n2, t2 = tel_counts(tlab, srv)
    assert (n2, [t2[k] for k in tx]) == (n1, [t1[k] for k in tx]), t2
    tlab.stop(srv)


def test_probe_against_knot_and_the_reflector(tlab):
    knot = tlab.start_knot(DEFAULT_ZONES, name="knot-tel")
    r = probe(tlab, knot.addr4, "--rate", "200", "--duration", "1", "--query", "www.example.com A")
    assert (r["sent"], r["answered"], r["stamped"]) == (200, 200, 0), r
    assert r["rtt"]["p50"] > 0
    refl = tlab.server([str(XDNS_BIN), "probe", "--reflect", f"{knot.addr4}:5353"], name="reflector")
    try:
        time.sleep(0.5)
        r = probe(tlab, knot.addr4, "--rate", "200", "--duration", "1", "--query", "www.example.com A",
                  "--baseline", f"{knot.addr4}:5353")
        assert r["baseline"]["count"] == 200, r
        assert r["answered"] == 200
        assert r["baseline"]["p50"] > 0
    finally:
        refl.kill()
        refl.wait()
    tlab.stop(knot)


def test_rule_edits_and_takeover_under_load_lose_no_query(tlab):
    srv = tlab.start_xdns(DEFAULT_ZONES, name="xdns-tel-t", xdp="native", extra=TEL)
    p = tlab.client([str(XDNS_BIN), "probe", f"{srv.addr4}:53", "--json", "--rate", "1000",
                     "--duration", "6", "--query", "www.example.com A"], name="probe-load")
    time.sleep(0.5)
    for i in range(20):
        control(srv, "add", "qtype=A sample=2" if i % 2 else "all")
        time.sleep(0.05)
        control(srv, "del", "all")
        time.sleep(0.05)
    new = tlab.xdns_takeover(srv, "xdns-tel-t2")
    p.wait(timeout=60)
    stdout = (tlab.dir / "probe-load.stdout").read_text()
    r = json.loads(stdout.strip().splitlines()[-1])
    assert r["sent"] == 6000 and r["answered"] == 6000, f"queries lost under rule edits and a takeover: {r}"
    assert r["stamped"] > 0, "the file's rule applies again after the takeover"
    tlab.stop(new)
