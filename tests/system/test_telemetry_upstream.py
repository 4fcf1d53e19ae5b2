"""Latency telemetry of the resolver's upstream queries (issue 27): xdns resolving on the lab
tree (tests/lab/tree.py) with a rule for path `resolver-upstream` times each upstream exchange
that got a reply, send to reply, into the `resolver_upstream` histogram (`xdns stats`,
`--json`, `/metrics`). With `fanout = 1` every upstream query counted by the resolver
(`resolver.upstream_queries`) is one exchange: the histogram must count exactly those that did
not time out. Answers are not timed (no rule for their paths), and with the rule removed no
upstream query is.
"""

from __future__ import annotations

import time

import pytest

from lab import XDNS_BIN, Lab, run
from tree import Tree, ask_a, start_xdns_resolver, stop

ADDRESS = "198.19.50.1"  # *.wild.example. A
RULES = '\n[telemetry]\nrules = ["path=resolver-upstream"]\n'


@pytest.fixture(scope="module")
def tree_lab():
    with Lab(prefix="xdl") as lab:
        tree = Tree(lab).start()
        yield lab, tree


def counts(lab: Lab, srv) -> tuple[int, int, int, dict]:
    """(histogram count, upstream queries, upstream timeouts, latency)."""
    st = lab.xdns_stats(srv)
    r = st["resolver"]
    return st["latency"]["resolver_upstream"]["count"], r["upstream_queries"], r["upstream_timeouts"], st["latency"]


def settled(lab: Lab, srv) -> tuple[int, int, int, dict]:
    """counts() once two reads 0.3 s apart agree (no exchange in flight)."""
    last = counts(lab, srv)
    for _ in range(30):
        time.sleep(0.3)
        now = counts(lab, srv)
        if now[:3] == last[:3]:
            return now
        last = now
    return last


def test_upstream_queries_timed(tree_lab):
    lab, tree = tree_lab
    srv = start_xdns_resolver(lab, tree, name="xdns-tel-up", extra="fanout = 1" + RULES)
    try:
        h0, q0, to0, _ = settled(lab, srv)
        names = [f"tel{i}.wild.example." for i in range(20)]
        for n in names:
            ask_a(lab, srv.addr4, n, ADDRESS)
        h1, q1, to1, lat = settled(lab, srv)
        assert q1 - q0 >= len(names), (q0, q1)
        assert h1 - h0 == (q1 - q0) - (to1 - to0), (h0, h1, q0, q1, to0, to1)
        up = lat["resolver_upstream"]
        # a lab exchange over veths: more than nothing, under a second
        assert 0 < up["p50_ns"] <= up["p99_ns"] < 1_000_000_000, up
        assert lat["resolver_miss"]["count"] == 0 and lat["resolver_hit"]["count"] == 0, lat
        # the same names again: answered from the cache, no upstream query, nothing timed
        for n in names:
            ask_a(lab, srv.addr4, n, ADDRESS)
        assert settled(lab, srv)[:2] == (h1, q1)
        # exported: /metrics and the stats table
        text = lab.xdns_metrics(srv)
        assert f'xdns_latency_seconds_count{{path="resolver_upstream"}} {h1}' in text, text[-2000:]
        out = run([str(XDNS_BIN), "stats", "--control", str(srv.extra["control"])], timeout=10).stdout
        assert "latency.resolver_upstream" in out and f"n {h1} " in out, out
        # rule removed: new resolutions ask upstream, none is timed
        p = run([str(XDNS_BIN), "telemetry", "--control", str(srv.extra["control"]), "del", "all"], timeout=10)
        assert p.stdout.strip() == "ok 0"
        for i in range(5):
            ask_a(lab, srv.addr4, f"off{i}.wild.example.", ADDRESS)
        time.sleep(0.5)
        h2, q2, _, _ = counts(lab, srv)
        assert q2 - q1 >= 5 and h2 == h1, (h1, h2, q1, q2)
    finally:
        stop(lab, srv)
