"""`xdns flush` empties the kernel answer cache whole, and root priming in the lab.

xdns runs as a resolver on the lab tree (tests/lab/tree.py) with its XDP program on the server
veth and a userspace cache of `cache_entries = 8` (16 shards of one entry: at most 16 answers),
far below the kernel cache's 32768 + 8192 + 2048 entries. NAMES distinct wildcard names (TTL
300 s) are each resolved once: every answer goes to both caches, and userspace evicts all but
a few while the kernel keeps them all. Then:

- each name asked again is answered by the kernel (`xdp.cache_answered` grows by NAMES), also
  the ones userspace no longer holds;
- `xdns flush` ("ok N": N = userspace answers, at most 16) must also delete the kernel entries
  userspace had forgotten (and so void the replies the kernel kept whole for them): each name asked once more misses in XDP (`xdp.pass_cache_miss`
  grows by NAMES, `cache_answered` not at all) and waits for an upstream resolution
  (`resolver.cache_misses` grows by NAMES).

Before the fix, flush removed only the keys userspace still held, and NAMES - N asks were
still answered by the kernel from the flushed cache.

`xdns flush NAME` forgets one name (its kernel entries too),
`--subtree` every name below it: checked the same way, one miss per flushed name.

Priming (RFC 8109): a hints file whose b.root-servers.lab. points at the blackhole (a stale
address: nothing answers there). xdns primes at start from a.root-servers.lab. and logs one
line naming the root set it took from the answer: root2's real addresses, not the stale ones.
"""

from __future__ import annotations

import dns.message
import pytest

from lab import Lab
from tree import Tree, ask_a, start_xdns_resolver, start_xdns_xdp_resolver, stop

NAMES = [f"flush{i}.wild.example." for i in range(48)]
ADDRESS = "198.19.50.1"  # *.wild.example. A


# `cache_entries = 8`, and misses left to userspace (`pass_cache_miss`): kernel iteration,
# on by default with [xdp], is not what these tests are about
USERSPACE_MISSES = "cache_entries = 8\nkernel_iteration = false"


@pytest.fixture(scope="module")
def tree_lab():
    with Lab(prefix="xdl") as lab:
        tree = Tree(lab).start()
        yield lab, tree


def ask(lab, addr: str, name: str) -> dns.message.Message:
    return ask_a(lab, addr, name, ADDRESS)


def ask_all(lab, srv) -> tuple[dict, dict]:
    """Every name once; the deltas of the resolver's and the XDP program's counters."""
    s0 = lab.xdns_stats(srv)
    for n in NAMES:
        ask(lab, srv.addr4, n)
    s1 = lab.xdns_stats(srv)
    res = {k: s1["resolver"][k] - s0["resolver"].get(k, 0) for k in s1["resolver"]}
    xdp = {k: s1["xdp"][k] - s0["xdp"].get(k, 0) for k in s1["xdp"]}
    return res, xdp


def flush(srv, *args: str) -> str:
    import subprocess
    from lab import XDNS_BIN
    p = subprocess.run([XDNS_BIN, "flush", "--control", srv.extra["control"], *args],
                       capture_output=True, text=True, timeout=10)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout.strip()


def test_flush_empties_the_kernel_cache_whole(tree_lab):
    lab, tree = tree_lab
    # kernel_iteration off (on by default with [xdp]): the misses counted below are the
    # cache stage's own verdict (`pass_cache_miss`), which kernel iteration would turn into
    # its handover (`pass_kit_handover`)
    srv = start_xdns_xdp_resolver(lab, tree, name="xdns-flush", extra=USERSPACE_MISSES)
    try:
        res, xdp = ask_all(lab, srv)  # resolved: into both caches, userspace evicts
        assert res["cache_misses"] == len(NAMES), res
        stats = lab.xdns_stats(srv)["resolver"]
        assert stats["cache_entries"] <= 16
        assert stats["kernel_cache_entries"] >= len(NAMES), stats
        assert stats["kernel_cache_evictions"] == 0, stats
        res, xdp = ask_all(lab, srv)  # all in the kernel, most no longer in userspace
        assert xdp["cache_answered"] == len(NAMES), xdp
        assert res["cache_misses"] == 0, res
        # Four times more: on a CPU that answered a name before, its hint; at the second hint
        # the reply is kept whole (bpf/reply.h), which flush must make unusable too. Five asks
        # on two CPUs put three of each name's on one CPU.
        for _ in range(4):
            res, xdp = ask_all(lab, srv)
            assert xdp["cache_answered"] == len(NAMES), xdp
        assert lab.xdns_stats(srv)["xdp_reply"]["kept"] > 0
        out = flush(srv)
        assert out.startswith("ok "), out
        assert int(out.split()[1]) <= 16, f"{out}: userspace held more than its bound"
        assert lab.xdns_stats(srv)["resolver"]["kernel_cache_entries"] == 0
        res, xdp = ask_all(lab, srv)
        assert xdp.get("cache_answered", 0) == 0, f"the kernel answered from a flushed cache: {xdp}"
        assert xdp.get("pass_cache_miss", 0) == len(NAMES), xdp
        assert res["cache_misses"] == len(NAMES), res
        assert "resolver caches flushed" in srv.stderr(), srv.stderr()[-3000:]
        assert srv.alive(), srv.stderr()[-3000:]
        assert "panicked" not in srv.stderr(), srv.stderr()[-3000:]
    finally:
        rc = stop(lab, srv)
    assert rc == 0, f"xdns did not stop cleanly:\n{srv.stderr()[-3000:]}"


def test_flush_by_name_and_subtree(tree_lab):
    """`xdns flush NAME` deletes that name's kernel entries, also those userspace dropped, and
    nothing else; `--subtree` every name below. Then each name misses in XDP exactly once."""
    lab, tree = tree_lab
    srv = start_xdns_xdp_resolver(lab, tree, name="xdns-flushname", extra=USERSPACE_MISSES)
    try:
        ask_all(lab, srv)
        res, xdp = ask_all(lab, srv)
        assert xdp["cache_answered"] == len(NAMES), xdp
        one = NAMES[0]  # asked first: most likely gone from the 16-entry userspace cache
        assert flush(srv, one) in ("ok 0", "ok 1")
        res, xdp = ask_all(lab, srv)
        assert xdp.get("pass_cache_miss", 0) == 1, f"only {one} was flushed: {xdp}"
        assert xdp["cache_answered"] == len(NAMES) - 1, xdp
        assert res["cache_misses"] == 1, res
        assert flush(srv, "wild.example.", "--subtree").startswith("ok ")
        res, xdp = ask_all(lab, srv)
        assert xdp.get("cache_answered", 0) == 0, f"the kernel answered below a flushed subtree: {xdp}"
        assert res["cache_misses"] == len(NAMES), res
        assert "resolver cache flushed for a name" in srv.stderr(), srv.stderr()[-3000:]
        import subprocess
        from lab import XDNS_BIN
        bad = subprocess.run([XDNS_BIN, "flush", "--control", srv.extra["control"], "a..b"],
                             capture_output=True, text=True, timeout=10)
        assert bad.returncode != 0 and "not a domain name" in bad.stderr, bad.stdout + bad.stderr
        assert srv.alive(), srv.stderr()[-3000:]
    finally:
        rc = stop(lab, srv)
    assert rc == 0, f"xdns did not stop cleanly:\n{srv.stderr()[-3000:]}"


def test_priming_replaces_a_stale_hint_address(tree_lab):
    lab, tree = tree_lab
    stale4, stale6 = tree.addr("blackhole")
    root2_4, root2_6 = tree.addr("root2")
    hints = tree.dir / "stale.hints"
    hints.write_text(tree.root_hints_text().replace(root2_4 + "\n", stale4 + "\n")
                     .replace(root2_6 + "\n", stale6 + "\n"))
    assert stale4 in hints.read_text() and root2_4 not in hints.read_text()
    srv = start_xdns_resolver(lab, tree, name="xdns-priming", root_hints=hints)
    try:
        stats = lab.xdns_stats(srv)["resolver"]
        assert stats["primings"] == 1 and stats["priming_failures"] == 0, stats
        lines = [l for l in srv.stderr().splitlines() if "root priming" in l]
        assert len(lines) == 1, lines
        assert "2 root servers" in lines[0], lines
        for a in (root2_4, root2_6, *tree.addr("root1")):
            assert a in lines[0], (a, lines)
        assert stale4 not in lines[0] and stale6 not in lines[0], lines
        # Cold resolutions (flushed: delegations and RTTs gone) start at the primed root set,
        # which a flush keeps; no second priming within the root NS TTL (300 s).
        for i in range(5):
            flush(srv)
            ask(lab, srv.addr4, f"prime{i}.wild.example.")
        stats = lab.xdns_stats(srv)["resolver"]
        assert stats["primings"] == 1, stats
    finally:
        rc = stop(lab, srv)
    assert rc == 0, f"xdns did not stop cleanly:\n{srv.stderr()[-3000:]}"
