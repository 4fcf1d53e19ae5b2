"""Kernel iteration (issue 32) end to end on the lab tree: xdns with its XDP program on the
server veth and `[resolver] kernel_iteration = true`. A cold miss is rewritten in the kernel
into a query to a root server (from the hints; the zone map knows no deeper cut yet), with a
random ID, port of the reserved range and 0x20 case; the root's response is checked in the
kernel and handed to the daemon's socket on that port, and userspace finishes the resolution
and answers the client, once. Every corpus case must then get the tree's answer, exactly as
without kernel iteration (test_resolver.py checks the same cases the same way), and the
counters must show that the kernel sent the queries and accepted the responses.
"""

from __future__ import annotations

import concurrent.futures as cf

import dns.message
import dns.rcode
import pytest

import resolver_corpus as corpus
from lab import Lab
from tree import Tree, flush, start_xdns_resolver, stop

QUERY_TIMEOUT = 8.0
# the corpus cases of plain names under good servers (no spoofer, blackhole, slow or lame
# server: those time the kernel's query out, and the daemon's timer hands them over)
PLAIN = [c for c in corpus.CASES if c.qname.endswith("good.lab.") and c.rcode == "NOERROR"][:8]


@pytest.fixture(scope="module")
def kit_lab():
    with Lab(prefix="xdl") as lab:
        tree = Tree(lab).start()
        srv = start_xdns_resolver(lab, tree, name="xdns-kit", xdp="native",
                                  extra='kernel_iteration = true\nkernel_iteration_ports = "61000-61063"\n')
        yield lab, srv
        assert srv.alive(), srv.stderr()[-3000:]
        assert "panicked" not in srv.stderr(), srv.stderr()[-3000:]
        assert stop(lab, srv) == 0, srv.stderr()[-3000:]


def ask(lab, addr, qname, qtype):
    q = dns.message.make_query(qname, qtype, use_edns=0, payload=1232)
    wire = lab.udp(addr, q.to_wire(), timeout=QUERY_TIMEOUT)
    return q, (dns.message.from_wire(wire) if wire is not None else None)


def test_cold_misses_iterated_in_the_kernel_get_their_answers(kit_lab):
    lab, srv = kit_lab
    assert PLAIN, "corpus cases under good.lab."
    # The first miss finds no neighbour entry for the root server yet (bpf_fib_lookup:
    # NO_NEIGH): it is handed over, and userspace's own query to the root resolves the
    # neighbour. Then the caches are emptied: the corpus below is all cold misses again.
    q, m = ask(lab, srv.addr4, PLAIN[0].qname, PLAIN[0].qtype)
    assert m is not None and m.rcode() == 0, m
    assert lab.xdns_stats(srv)["kit"]["handover_fib"] >= 1, lab.xdns_stats(srv)["kit"]
    flush(lab, srv)
    before = lab.xdns_stats(srv)["xdp"]
    with cf.ThreadPoolExecutor(max_workers=8) as ex:
        futs = {c.id: ex.submit(ask, lab, srv.addr4, c.qname, c.qtype) for c in PLAIN}
        got = {cid: f.result() for cid, f in futs.items()}
    for c in PLAIN:
        q, m = got[c.id]
        assert m is not None, f"{c.id}: no answer"
        assert m.id == q.id and m.question == q.question, c.id
        assert dns.rcode.to_text(m.rcode()) == c.rcode, f"{c.id}: {m}"
        answer = sorted(str(rr) for rrset in m.answer for rr in rrset.to_text().splitlines())
        for want in c.answer:
            name, rtype, data = want.split(" ", 2)
            assert any(name.lower() in a.lower() and f" {rtype} " in a and a.endswith(data) for a in answer), f"{c.id}: {answer}"
    after = lab.xdns_stats(srv)["xdp"]
    sent = after.get("kit_sent", 0) + after.get("kit_redirected", 0) - before.get("kit_sent", 0) - before.get("kit_redirected", 0)
    assert sent >= len(PLAIN) // 2, f"the kernel sent the first queries: {after}"
    assert after.get("pass_kit_response", 0) > before.get("pass_kit_response", 0), f"responses accepted: {after}"
    assert after.get("drop_kit_question", 0) == before.get("drop_kit_question", 0), after
    kit = lab.xdns_stats(srv)["kit"]
    assert kit["responses"] >= 1 and kit["pending"] == 0, kit
