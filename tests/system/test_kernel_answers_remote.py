"""Kernel iteration's own answers (issue 32, `kit_answered`): on the lab's remote tree
(tests/lab/tree.py, "Remote tree"; set up as in test_kernel_iteration_remote.py), a cold miss
whose final response has the common shape (bpf/README.md, "Kernel iteration": NOERROR, AA,
the question's A, AAAA or TXT RRset alone, owner compressed to the question) is answered by
the XDP program itself, and

- the kernel answered it (`kit_answered` or `kit_answered_redirected` moved by one; the
  daemon read the record marked answered, cached it as a final answer and sent nothing:
  `answered_read`, `response_answer`, `answered_other` 0), with exactly one reply;
- the reply is byte for byte the one the userspace path sends for the same query bytes: an
  xdns on the same tree with kernel iteration off (and no XDP), both caches flushed first,
  but the ID (each resolver's clients pick their own) and the TTLs (compared apart: aged
  by at most the seconds between the two resolutions);
- the same query again is a kernel cache hit (`cache_answered`), byte for byte the first
  reply but the ID and the TTLs (aged by at most the time between them).

Names: leaf1's (Knot) A, AAAA and TXT of good.lab. and a wildcard of wild.example., with
and without EDNS, DO=1, the client's mixed case, over IPv4 and IPv6; and negative answers
of the shape the kernel answers (bpf/README.md, "Kernel answers", negative answers), the
SOA in authority: NXDOMAIN in good.lab., NODATA for mail.good.lab.'s AAAA (it has an A) and
for sub.wild.example.'s A (it has a TXT and blocks the wildcard), whose SOA's RNAME
(hostmaster.nic.lab.) is written out in full; NXDOMAIN from lab.'s server (NSD) and from the
root (Knot or NSD), whose RNAME points into MNAME.
"""

from __future__ import annotations

import time

import dns.flags
import dns.message
import dns.rcode
import pytest

from lab import Lab
from test_kernel_iteration_remote import DELAY, KIT
from tree import Tree, flush, start_xdns_resolver, stop

# (id, name, type, EDNS payload or None, DO, family)
CASES = [
    ("a-edns", "www.good.lab.", "A", 1232, False, 4),
    ("aaaa-do-mixed-case", "wWw.GoOd.LaB.", "AAAA", 1232, True, 4),
    ("txt-no-edns", "www.good.lab.", "TXT", None, False, 4),
    ("wildcard-a", "k1.wild.example.", "A", 4096, False, 4),
    ("a-ipv6", "k6.wild.example.", "A", 1232, False, 6),
    # negative answers (NXDOMAIN, NODATA: the SOA in authority, its negative TTL)
    ("nxdomain-a", "nosuch.good.lab.", "A", 1232, False, 4),
    ("nodata-aaaa-ipv6-do-mixed-case", "MaiL.gOOd.lab.", "AAAA", 1232, True, 6),
    ("nodata-a-no-edns", "sub.wild.example.", "A", None, False, 4),
    # RNAME hostmaster.nic.lab. a pointer into MNAME (ns1.nic.lab., a.root-servers.lab.)
    ("nxdomain-tld-nsd", "nosuch.lab.", "A", 1232, False, 4),
    ("nxdomain-root-ipv6", "nosuchtld.", "AAAA", 1232, False, 6),
]
# Each (name, type) once: a question asked before may come back through a cache hint of the
# CPU's memo, which kernel iteration hands over (`no_walk`: no label hashes to walk the cuts).


@pytest.fixture(scope="module")
def remote():
    with Lab() as lab:
        tree = Tree(lab, name="tree-kans", remote=True, delay_ms=DELAY).start()
        srv = start_xdns_resolver(lab, tree, name="xdns-kans", xdp="native", uplink=True,
                                  forwarding=True, uplink_forwarding=True, extra=KIT)
        ref = start_xdns_resolver(lab, tree, name="xdns-kans-ref")
        # the next hops' neighbour entries, both families: an unresolved one is a handover
        # (`fib`: the kernel sends nothing to resolve it), not what these tests are about
        for addr in (srv.addr4, srv.addr6):
            assert ask(lab, addr, query("warm.wild.example.", "A", 1232, False)), addr
        yield lab, srv, ref
        for s in (srv, ref):
            assert s.alive(), s.stderr()[-3000:]
            assert "panicked" not in s.stderr(), s.stderr()[-3000:]
            assert stop(lab, s) == 0, s.stderr()[-3000:]


def query(name: str, qtype: str, payload: int | None, do: bool) -> bytes:
    """The query's wire form: RD, the name's case kept, EDNS with `payload` (None: none)."""
    if payload is None:
        q = dns.message.make_query(name, qtype, use_edns=False)
    else:
        q = dns.message.make_query(name, qtype, use_edns=0, payload=payload, want_dnssec=do)
    assert q.flags & dns.flags.RD
    return q.to_wire()


def ask(lab, addr: str, wire: bytes, linger: float = 0.5) -> list[bytes]:
    """`wire` from the client namespace to `addr`; every reply until `linger` s after the
    first (8 s without one)."""
    return lab.replies(wire, addr, linger)


def ttls_apart(m: bytes) -> tuple[bytes, list[int]]:
    """`m` with every record's TTL zeroed (the OPT's kept: flags, not a TTL), and the TTLs."""
    b = bytearray(m)
    counts = [int.from_bytes(m[i:i + 2], "big") for i in (4, 6, 8, 10)]

    def skip_name(p: int) -> int:
        while True:
            ln = b[p]
            if ln == 0:
                return p + 1
            if ln >= 0xC0:
                return p + 2
            p += 1 + ln

    p = 12
    for _ in range(counts[0]):
        p = skip_name(p) + 4
    ttls = []
    for _ in range(sum(counts[1:])):
        p = skip_name(p)
        rtype = int.from_bytes(b[p:p + 2], "big")
        if rtype != 41:
            ttls.append(int.from_bytes(b[p + 4:p + 8], "big"))
            b[p + 4:p + 8] = b"\0\0\0\0"
        p += 10 + int.from_bytes(b[p + 8:p + 10], "big")
    assert p == len(b), f"walked {p} of {len(b)} bytes"
    return bytes(b), ttls


def xdp(lab, srv) -> dict:
    return lab.xdns_stats(srv)["xdp"]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_the_kernels_answer_is_the_userspace_answer(remote, case):
    lab, srv, ref = remote
    _, name, qtype, payload, do, fam = case
    wire = query(name, qtype, payload, do)
    addr, ref_addr = (srv.addr4, ref.addr4) if fam == 4 else (srv.addr6, ref.addr6)
    flush(lab, srv)
    flush(lab, ref)

    before, kit_before = xdp(lab, srv), lab.xdns_stats(srv)["kit"]
    got = ask(lab, addr, wire)
    after, kit_after = xdp(lab, srv), lab.xdns_stats(srv)["kit"]
    assert len(got) == 1, f"{name} {qtype}: {len(got)} replies"
    first = got[0]
    answered = sum(after[k] - before.get(k, 0) for k in ("kit_answered", "kit_answered_redirected"))
    moved = {k: kit_after[k] - kit_before.get(k, 0) for k in kit_after}
    assert answered == 1, ({k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}, {k: v for k, v in moved.items() if v})
    assert moved["answered"] == 1 and moved["answered_other"] == 0, moved
    t0 = time.monotonic()
    # the daemon caches it from the ring record (at once, on its reader thread)
    for _ in range(50):
        kit_now = lab.xdns_stats(srv)["kit"]
        if kit_now["answered_read"] > kit_before["answered_read"]:
            break
        time.sleep(0.02)
    assert kit_now["answered_read"] - kit_before["answered_read"] == 1, kit_now
    assert kit_now["response_answer"] - kit_before["response_answer"] == 1, kit_now
    assert kit_now["answered_other"] == kit_before["answered_other"], kit_now

    # the userspace path, same query bytes, same tree, cold
    theirs = ask(lab, ref_addr, wire)
    elapsed = time.monotonic() - t0
    assert len(theirs) == 1, theirs
    mine, my_ttls = ttls_apart(first)
    them, their_ttls = ttls_apart(theirs[0])
    assert mine[2:] == them[2:], (first.hex(), theirs[0].hex())
    assert len(my_ttls) == len(their_ttls) and all(0 <= m - t <= int(elapsed) + 1 for m, t in zip(my_ttls, their_ttls)), (my_ttls, their_ttls)
    assert first[:2] == wire[:2] and theirs[0][:2] == wire[:2], "each reply has the query's ID"

    # a later hit: the kernel cache, the same bytes but the TTLs
    time.sleep(0.05)
    h0 = xdp(lab, srv)
    t1 = time.monotonic()
    again = ask(lab, addr, wire)
    h1 = xdp(lab, srv)
    assert len(again) == 1, again
    assert h1["cache_answered"] - h0["cache_answered"] == 1, "a kernel cache hit"
    hit, hit_ttls = ttls_apart(again[0])
    assert hit == mine, (first.hex(), again[0].hex())
    waited = time.monotonic() - t0 + (time.monotonic() - t1)
    assert all(0 <= m - h <= int(waited) + 1 for m, h in zip(my_ttls, hit_ttls)), (my_ttls, hit_ttls)


def test_a_reload_caps_the_kernels_negative_ttl(remote):
    """`max_negative_ttl` changed by a reload (SIGHUP) reaches the kernel's answers: an
    NXDOMAIN answered by the kernel afterwards carries the new cap as its SOA's TTL (the lab's
    SOAs: MINIMUM 60, so min(TTL, MINIMUM) is 60 and a cap of 20 shows), as the cache stores
    it (the later hit's TTL is at most the cap too). Put back afterwards."""
    import signal

    lab, srv, _ = remote
    conf = srv.extra["conf"]
    before_text = conf.read_text()
    assert "[resolver]\n" in before_text and "max_negative_ttl" not in before_text
    wire = query("nosuch-reload.good.lab.", "A", 1232, False)

    def reload(text: str, marker: int) -> None:
        conf.write_text(text)
        srv.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while srv.stderr().count("resolver settings replaced") <= marker:
            assert time.monotonic() < deadline, srv.stderr()[-3000:]
            time.sleep(0.05)

    marker = srv.stderr().count("resolver settings replaced")
    reload(before_text.replace("[resolver]\n", "[resolver]\nmax_negative_ttl = 20\n", 1), marker)
    try:
        flush(lab, srv)
        before = xdp(lab, srv)
        got = ask(lab, srv.addr4, wire)
        after = xdp(lab, srv)
        assert len(got) == 1, got
        answered = sum(after[k] - before.get(k, 0) for k in ("kit_answered", "kit_answered_redirected"))
        assert answered == 1, {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
        m = dns.message.from_wire(got[0])
        assert m.rcode() == dns.rcode.NXDOMAIN and len(m.authority) == 1, m
        assert m.authority[0].ttl == 20, m.authority[0]
        time.sleep(0.05)
        again = ask(lab, srv.addr4, wire)
        assert len(again) == 1
        hit = dns.message.from_wire(again[0])
        assert hit.authority[0].ttl <= 20, hit.authority[0]
    finally:
        reload(before_text, srv.stderr().count("resolver settings replaced"))
