"""Kernel iteration (issue 32) where the kernel really sends: the lab's remote tree
(tests/lab/tree.py, "Remote tree"), its servers behind a route and the delaying relay, xdns's
XDP program on the server veth and on the uplink (where the responses arrive), forwarding on
the server veth (the kernel's queries are redirected to the uplink: `kit_redirected`) and on
the uplink (the next query of a referral that came in there: tree.py's `uplink_forwarding`),
and `[resolver] kernel_iteration = true`. Unbound runs on the same tree as the reference.

Checked:
- the whole resolver corpus (tests/system/resolver_corpus.py: 44 cases, leaves, CNAMEs within
  and across TLDs, glueless zones, NXDOMAIN and NODATA at every level, wildcards, short TTLs,
  a silent server, the spoofer's zones), asked cold one after the other: xdns's answer is the
  corpus answer (rcode, answer RRs, SOA owner of a negative answer) and Unbound's where
  Unbound agrees with the corpus (where it does not: test_resolver.DEVIATIONS, the 0x20
  forgery); the kernel sent queries (`kit` group `sent`) and followed referrals itself
  (`hops`: iteration in the kernel, not only handovers), none of the misses was handed over
  for want of a next hop (`fib`), the responses were used (`response_answer`,
  `response_referral`, ...), and the zone map holds the delegations learnt (`kit_state`
  group, `zones`);
- each client gets exactly one answer (a socket listening on after the first);
- the same question again is a kernel cache hit (`cache_answered` moves), byte for byte the
  answer given before except the ID and the TTLs;
- the spoofer's zones, every spoof case of the corpus (forged ID, source port, source
  address, question, 0x20 case), each asked with caches flushed and the zone's cut learnt
  first, so the kernel asks the spoofer's zone itself: the genuine answer (the corpus's:
  Unbound may refuse the 0x20 forgery's zone), and where the spoofer is the zone's only
  server, the kernel dropped its forgeries (`drop_kit_*`), none accepted;
- `--takeover` with kernel iteration on: no client lost, none answered twice.
"""

from __future__ import annotations

import time

import dns.message
import dns.rcode
import pytest

import resolver_corpus as corpus
from lab import Lab
from test_resolver import DEVIATIONS
from tree import Tree, flush, start_unbound, start_xdns_resolver, stop

DELAY = {"leaf1": 4.0, "tld-lab": 2.0}  # one-way ms
KIT = 'kernel_iteration = true\nkernel_iteration_ports = "61000-61063"\n'
CASE_IDS = [c.id for c in corpus.CASES]
SPOOF_IDS = [c.id for c in corpus.CASES if "spoof" in c.qname]


@pytest.fixture(scope="module")
def remote():
    with Lab() as lab:
        tree = Tree(lab, name="tree-kit", remote=True, delay_ms=DELAY).start()
        # forwarding: the kernel's query leaves by the uplink, not by the interface the
        # client's query came in (start_xdns_resolver's doc)
        srv = start_xdns_resolver(lab, tree, name="xdns-kit", xdp="native", uplink=True,
                                  forwarding=True, uplink_forwarding=True, extra=KIT)
        ub = start_unbound(lab, tree)
        yield lab, tree, srv, ub
        assert srv.alive(), srv.stderr()[-3000:]
        assert "panicked" not in srv.stderr(), srv.stderr()[-3000:]
        assert stop(lab, srv) == 0, srv.stderr()[-3000:]


summarize = corpus.summarize  # what the comparison looks at


def truth(case: corpus.Case) -> dict:
    """The corpus answer in summarize()'s shape."""
    def norm(rr: str) -> str:
        owner, rtype, rdata = rr.split(" ", 2)
        return f"{owner.lower()} {rtype} {rdata.lower() if rtype in ('CNAME', 'NS', 'MX') else rdata}"
    return {"rcode": case.rcode, "answer": sorted(norm(a) for a in case.answer), "soa": case.soa}


def ask_all(lab, addr: str, qname: str, qtype: str, linger: float = 1.0):
    """Asks once from the client namespace; returns the query and every reply received until
    `linger` seconds after the first (or 8 s without one)."""
    q = dns.message.make_query(qname, qtype, use_edns=0, payload=1232)
    return q, lab.replies(q.to_wire(), addr, linger)


def one_answer(lab, addr, qname, qtype):
    q, got = ask_all(lab, addr, qname, qtype)
    assert len(got) == 1, f"{qname} {qtype}: {len(got)} answers"
    m = dns.message.from_wire(got[0])
    assert m.id == q.id and m.question == q.question, m
    return m, got[0]


def reference_answer(lab, ub, qname: str, qtype: str, tries: int = 4) -> bytes:
    """Unbound's answer, the question asked again every 8 s while Unbound is still resolving
    (the repeats join the resolution under way). Once a server of a zone has timed out,
    Unbound may probe it again with a timeout of up to 12 s (its PROBE_MAXRTO), so one
    resolution of slow.lab. (one server a blackhole) can outlast two tries: CI saw 16 s."""
    q = dns.message.make_query(qname, qtype, use_edns=0, payload=1232).to_wire()
    for _ in range(tries):
        raw = lab.udp(ub.addr4, q, timeout=8.0)
        if raw is not None:
            return raw
    raise AssertionError(f"{qname} {qtype}: Unbound did not answer in {tries} x 8 s")


def kit(lab, srv) -> dict:
    return lab.xdns_stats(srv)["kit"]


def test_corpus_iterated_by_the_kernel_equals_unbound(remote):
    lab, _, srv, ub = remote
    before = kit(lab, srv)
    diffs, unbound_differs = [], []
    for cid in CASE_IDS:
        c = corpus.BY_ID[cid]
        m, _ = one_answer(lab, srv.addr4, c.qname, c.qtype)
        raw = reference_answer(lab, ub, c.qname, c.qtype)
        theirs = summarize(dns.message.from_wire(raw))
        want = truth(c)
        if summarize(m) != want:
            diffs.append((cid, summarize(m), want, theirs))
        if theirs != want:
            # the references disagree: only where test_resolver documents Unbound's deviation
            alts = [dict(want, **a) for a in DEVIATIONS.get(("unbound", cid), ([], "", False))[0]]
            if theirs not in alts:
                unbound_differs.append((cid, theirs, want))
    assert not diffs, diffs
    assert not unbound_differs, f"Unbound differs from the corpus, undocumented: {unbound_differs}"
    after = kit(lab, srv)
    moved = {k: after[k] - before.get(k, 0) for k in after}
    assert moved["sent"] >= len(CASE_IDS) // 2, moved
    assert moved["hops"] >= 2, f"referrals followed in the kernel (root -> TLD -> leaf): {moved}"
    assert moved["handover_fib"] == 0, f"the kernel found a next hop for every miss: {moved}"
    assert moved["responses"] > 0, moved
    assert moved["response_answer"] + moved["response_referral"] > 0, f"responses used: {moved}"
    state = lab.xdns_stats(srv)["kit_state"]
    assert state["zones"] >= 3, f"delegations copied into the zone map: {state}"
    assert state["pending"] == 0, state


def test_a_deeper_cut_is_asked_directly_and_answered_from_its_response(remote):
    """Once good.lab.'s cut is in the zone map, a new name under it is one kernel query to
    leaf1, whose final answer the kernel hands over in its ring buffer (handed, ring_read)
    and the daemon uses (response_answer) without asking again."""
    lab, _, srv, _ = remote
    flush(lab, srv)  # the corpus test asked good.lab. MX already
    one_answer(lab, srv.addr4, "www.good.lab.", "A")
    time.sleep(0.2)  # the writer copies the resolver's delegations every 20 ms
    before = kit(lab, srv)
    res_before = lab.xdns_stats(srv)["resolver"]["upstream_queries"]
    m, _ = one_answer(lab, srv.addr4, "good.lab.", "MX")
    assert m.rcode() == dns.rcode.NOERROR
    after = kit(lab, srv)
    assert after["sent"] - before["sent"] == 1, (before, after)
    assert after["response_answer"] - before["response_answer"] == 1, (before, after)
    # handed over through the kernel's ring buffer (the entry claimed by the kernel), not read
    # from a reserved port's socket
    assert (after["handed"] - before["handed"], after["ring_read"] - before["ring_read"]) == (1, 1), (before, after)
    assert lab.xdns_stats(srv)["resolver"]["upstream_queries"] == res_before, "userspace asked nothing"


def test_a_later_query_is_a_kernel_cache_hit(remote):
    lab, _, srv, _ = remote
    first, w1 = one_answer(lab, srv.addr4, "good.lab.", "TXT")
    time.sleep(0.1)
    xdp_before = lab.xdns_stats(srv)["xdp"]
    second, w2 = one_answer(lab, srv.addr4, "good.lab.", "TXT")
    xdp_after = lab.xdns_stats(srv)["xdp"]
    assert xdp_after["cache_answered"] - xdp_before["cache_answered"] == 1, (xdp_before, xdp_after)
    assert summarize(first) == summarize(second)
    assert len(w1) == len(w2)


@pytest.mark.parametrize("case_id", SPOOF_IDS)
def test_spoofed_zones_get_the_genuine_answer(remote, case_id):
    lab, _, srv, _ = remote
    c = corpus.BY_ID[case_id]
    # cold (the corpus test asked the same names), then the zone's cut learnt, so the kernel
    # asks the spoofer's zone itself
    flush(lab, srv)
    one_answer(lab, srv.addr4, "learn." + c.qname.split(".", 1)[1], "A")
    time.sleep(0.2)
    before = lab.xdns_stats(srv)
    m, _ = one_answer(lab, srv.addr4, c.qname, c.qtype)
    # the corpus answer, not Unbound's: a forged reply can win against a resolver without
    # 0x20 checks (the case-spoof zone), which is what these cases are about
    assert summarize(m) == truth(c), m
    after = lab.xdns_stats(srv)
    assert after["kit"]["sent"] > before["kit"]["sent"], "the kernel asked"
    dropped = {k: after["xdp"][k] - before["xdp"].get(k, 0) for k in after["xdp"] if k.startswith("drop_kit_")}
    if c.qname.endswith("spoofonly.lab."):
        # the spoofer is the zone's only server: the kernel asked it, and dropped its forgeries
        # (ID + 1: unsolicited; port 5300: src_port; another address: unsolicited)
        assert dropped.get("drop_kit_unsolicited", 0) >= 2 and dropped.get("drop_kit_src_port", 0) >= 1, dropped


def test_takeover_with_kernel_iteration_loses_no_client():
    """`xdns serve --takeover` with kernel iteration on: the new process takes the reserved
    ports' sockets over with the listeners (else it could not bind them), the old one, when
    it stops, resolves in userspace every query its program still had pending (their
    responses reach the new program, which does not know them, and are dropped). Misses
    asked before, during and after the hand-over each get exactly one, right answer, and the
    new process iterates in the kernel too."""
    import concurrent.futures as cf
    import threading
    with Lab() as lab:
        tree = Tree(lab, name="tree-kit-to", remote=True, delay_ms=DELAY).start()
        srv = start_xdns_resolver(lab, tree, name="xdns-kit-a", xdp="native", uplink=True,
                                  forwarding=True, uplink_forwarding=True, extra=KIT)
        one_answer(lab, srv.addr4, "warm.wild.example.", "A")
        stop_load = threading.Event()
        results = []

        def load(k: int) -> None:
            i = 0
            while not stop_load.is_set():
                name = f"to{k}-{i}.wild.example."
                q, got = ask_all(lab, srv.addr4, name, "A", linger=0.3)
                results.append((name, q, got))
                i += 1

        with cf.ThreadPoolExecutor(max_workers=4) as ex:
            futs = [ex.submit(load, k) for k in range(4)]
            time.sleep(1.0)
            during = len(results)
            new = lab.xdns_takeover(srv, "xdns-kit-b")
            time.sleep(1.0)
            stop_load.set()
            for f in futs:
                f.result()
        assert srv.proc.returncode == 0, srv.stderr()[-3000:]
        assert "panicked" not in srv.stderr() + new.stderr()
        assert len(results) > during > 0, (during, len(results))
        bad = []
        for name, q, got in results:
            ms = [dns.message.from_wire(w) for w in got]
            if len(ms) != 1 or ms[0].id != q.id or \
                    [rd.to_text() for r in ms[0].answer for rd in r] != ["198.19.50.1"]:
                bad.append((name, [str(m) for m in ms]))
        assert not bad, bad[:5]
        before = kit(lab, new)
        m, _ = one_answer(lab, new.addr4, "after.wild.example.", "A")
        assert [rd.to_text() for r in m.answer for rd in r] == ["198.19.50.1"]
        assert kit(lab, new)["sent"] - before["sent"] == 1, "the new process iterates in the kernel"
        assert stop(lab, new) == 0, new.stderr()[-3000:]
