"""Prefetch with the XDP cache stage: a hot name is refreshed before it expires, so it never
misses.

xdns runs as a resolver on the lab tree (tests/lab/tree.py) with its XDP program on the server
veth. www.short.lab. has TTL 2 s; prefetch_percent = 10 and the default prefetch_min_ttl (2 s)
make its prefetch window the last 0.2 s of each TTL. The name is asked once (the one miss: a
real resolution), then over UDP every POLL_INTERVAL seconds for 2 TTLs + 0.5 s, crossing two
expiries. With prefetch, the kernel's first hit inside the window sends its ring-buffer event,
the daemon resolves the name again and installs the fresh answer before the old one expires:

- every ask is answered from the cache, by the kernel (`xdp.cache_answered` grows by one per
  ask; a `pass_cache_race`, the kernel seeing the entry being rewritten, goes to the userspace
  cache and still counts as a hit there);
- no ask waits for an upstream resolution (`resolver.cache_misses` does not grow);
- `resolver.prefetches` counts the refreshes (one per TTL window crossed).

The control runs the same without prefetch and sees a miss at each expiry: the first test's
zero is the prefetcher's doing, not an entry that never expires.
"""

from __future__ import annotations

import time

import dns.message
import pytest

from lab import Lab
from tree import SHORT_TTL, Tree, ask_a, start_xdns_xdp_resolver, stop

NAME = "www.short.lab."
ADDRESS = "198.19.70.1"
POLL_INTERVAL = 0.04  # seconds: 5 asks inside each 0.2 s prefetch window
POLL_SECONDS = 2 * SHORT_TTL + 0.5  # two expiries crossed


@pytest.fixture(scope="module")
def tree_lab():
    with Lab(prefix="xdl") as lab:
        tree = Tree(lab).start()
        yield lab, tree


def ask(lab, addr: str) -> dns.message.Message:
    m = ask_a(lab, addr, NAME, ADDRESS, timeout=2.0)
    assert 0 <= m.answer[0].ttl <= SHORT_TTL, m
    return m


def poll(lab, srv) -> tuple[int, dict, dict]:
    """One resolving ask, then POLL_SECONDS of asks; returns (asks polled, counter deltas of
    the resolver and of the XDP program over the poll)."""
    ask(lab, srv.addr4)
    s0 = lab.xdns_stats(srv)
    n = 0
    t0 = time.monotonic()
    while time.monotonic() < t0 + POLL_SECONDS:
        ask(lab, srv.addr4)
        n += 1
        time.sleep(max(0.0, t0 + n * POLL_INTERVAL - time.monotonic()))
    s1 = lab.xdns_stats(srv)
    res = {k: s1["resolver"][k] - s0["resolver"][k] for k in s1["resolver"]}
    xdp = {k: s1["xdp"][k] - s0["xdp"].get(k, 0) for k in s1["xdp"]}
    return n, res, xdp


def run(lab, tree, prefetch: bool) -> tuple[int, dict, dict]:
    # kernel_iteration off (on by default with [xdp]): a miss must show as the cache stage's
    # `pass_cache_miss`, which kernel iteration would count as its handover instead
    srv = start_xdns_xdp_resolver(lab, tree, name=f"xdns-prefetch-{'on' if prefetch else 'off'}",
                                  prefetch=prefetch, extra="kernel_iteration = false")
    try:
        out = poll(lab, srv)
        assert srv.alive(), srv.stderr()[-3000:]
        assert "panicked" not in srv.stderr(), srv.stderr()[-3000:]
    finally:
        rc = stop(lab, srv)
    assert rc == 0, f"xdns did not stop cleanly:\n{srv.stderr()[-3000:]}"
    return out


def test_hot_name_never_misses_with_prefetch(tree_lab):
    lab, tree = tree_lab
    n, res, xdp = run(lab, tree, prefetch=True)
    assert res["cache_misses"] == 0, f"an ask waited for an upstream resolution: {res}"
    # Every ask answered from the cache: by the kernel, or (entry being rewritten) userspace.
    race = xdp.get("pass_cache_race", 0)
    assert xdp["cache_answered"] == n - race, f"{n} asks: {xdp}"
    assert res["cache_hits"] == race, res
    assert xdp.get("pass_cache_expired", 0) == 0 and xdp.get("pass_cache_miss", 0) == 0, xdp
    # One refresh per TTL window crossed (two expiries; a third window may open at the end).
    assert res["prefetches"] >= 2, res
    assert res["upstream_queries"] > 0, res


def test_without_prefetch_the_hot_name_misses(tree_lab):
    """The control: the same polling without prefetch waits for a resolution at each expiry."""
    lab, tree = tree_lab
    n, res, xdp = run(lab, tree, prefetch=False)
    assert res["prefetches"] == 0, res
    assert res["cache_misses"] >= 2, f"{n} asks over two expiries, no miss: {res}"
    # Every other ask answered by the kernel, except the few in an entry's last 20 ms, which
    # the kernel leaves to userspace (pass_cache_expired: its coarse clock may lag a tick).
    assert xdp["cache_answered"] >= (n - res["cache_misses"] - xdp.get("pass_cache_race", 0)
                                     - xdp.get("pass_cache_expired", 0)), xdp
