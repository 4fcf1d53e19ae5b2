"""Kernel iteration (issue 32): userspace takes over, never loses. Each reason the issue lists
for handing a question to the userspace resolver, on the lab's remote tree (the kernel sends
its queries, as in test_kernel_iteration_remote.py), with `[resolver] kernel_iteration = true`
and Unbound on the same tree as the second reference.

The tree gets more zones, delegated from lab. by this test (tests/lab/misbehave.py, one
server with two addresses; glue A and AAAA for each):

    servfail.lab.  SERVFAIL from its IPv4 address, answers from its IPv6 address
    refused.lab.   REFUSED from IPv4, answers from IPv6
    lame.lab.      IPv4 answers an upward referral (not authoritative), IPv6 answers
    formerr.lab.   FORMERR to every query with EDNS, answers without it (RFC 6891 section 7)
    tc.lab.        TC=1 with no records over UDP, answers over TCP

and good.lab. gets `dn.good.lab. DNAME other.example.` (Knot synthesises the CNAME). The
client asks over IPv4, so the kernel asks the IPv4 glue (a server of the client's family):
the misbehaving address, every time. `fanout = 1`: no redundant query races the kernel's
(test_kernel_iteration_dead_server.py covers those), so the kernel's response is the one
handed over.

Checked for each case: the client gets exactly one answer (nothing more within a second),
the answer the tree gives (rcode, answer RRs, SOA owner of a negative answer) and Unbound's
(where Unbound answers the same; the timeout case is not asked of Unbound, which retries a
dead server longer than the client waits); the kernel sent queries for it (`kit.sent`), and
the counter of its reason moved (`kit.response_<use>`, `kit.timeout`, and the kernel's own
verdict where it passes the response itself: `pass_kit_glueless`, `pass_kit_bailiwick`):

    glueless NS            www.glueless.lab. A   response_glueless (+ xdp pass_kit_glueless)
    CNAME leaving the zone alias.good.lab. A     response_cname_out
    DNAME                  www.dn.good.lab. A    response_dname
    TC=1 (TCP retry)       www.tc.lab. A         response_truncated
    SERVFAIL               www.servfail.lab. A   response_servfail
    REFUSED                www.refused.lab. A    response_refused
    EDNS fallback          www.formerr.lab. A    response_edns_fallback
    lame                   www.lame.lab. A       response_lame (+ xdp pass_kit_bailiwick)
    timeout                www.dead.lab. A       timeout (the daemon's timer; SERVFAIL)

and a full pending map (`kernel_iteration_pending = 2`): eight misses at once under
tarpit.lab. (every answer 300 ms late), the kernel holding two queries, the others handed
over (`handover_pending_full`), each client answered once, right. Last, /metrics: the kit
group's totals are counters equal to `xdns stats`, its levels (`kit_state`: pending entries,
cuts) gauges.
"""

from __future__ import annotations

import concurrent.futures as cf
import re
import time

import dns.message
import pytest

import resolver_corpus as corpus
from lab import Lab
from misbehave import data_address
from test_kernel_iteration_remote import ask_all, kit, one_answer
from tree import TARPIT_A, Tree, start_unbound, start_xdns_resolver, stop

DELAY = {"leaf1": 4.0, "tld-lab": 2.0}  # one-way ms
KIT = ('kernel_iteration = true\nkernel_iteration_ports = "61000-61063"\n'
       'kernel_iteration_pending = 2\nupstream_timeout_ms = 1000\nfanout = 1\n')
MISBEHAVING = {"servfail.lab.": "servfail", "refused.lab.": "refused", "lame.lab.": "lame",
               "formerr.lab.": "formerr", "tc.lab.": "tc"}
summarize = corpus.summarize


def data(zone: str) -> str:
    return data_address(list(MISBEHAVING).index(zone) + 1)


def positive(*rrs: str) -> dict:
    return {"rcode": "NOERROR", "answer": sorted(rrs), "soa": None}


# id: (name, type, the tree's answer, kit counter that must move, xdp verdict that must move,
# asked of Unbound too)
CASES = {
    "glueless": ("www.glueless.lab.", "A", positive("www.glueless.lab. A 198.19.30.1"),
                 "response_glueless", "pass_kit_glueless", True),
    "cname-out": ("alias.good.lab.", "A", positive("alias.good.lab. CNAME www.other.example.",
                                                   "www.other.example. A 198.19.20.1"),
                  "response_cname_out", None, True),
    "dname": ("www.dn.good.lab.", "A", positive("dn.good.lab. DNAME other.example.",
                                                "www.dn.good.lab. CNAME www.other.example.",
                                                "www.other.example. A 198.19.20.1"),
              "response_dname", None, True),
    "tc": ("www.tc.lab.", "A", positive(f"www.tc.lab. A {data('tc.lab.')}"),
           "response_truncated", None, True),
    "servfail": ("www.servfail.lab.", "A", positive(f"www.servfail.lab. A {data('servfail.lab.')}"),
                 "response_servfail", None, True),
    "refused": ("www.refused.lab.", "A", positive(f"www.refused.lab. A {data('refused.lab.')}"),
                "response_refused", None, True),
    "edns-fallback": ("www.formerr.lab.", "A", positive(f"www.formerr.lab. A {data('formerr.lab.')}"),
                      "response_edns_fallback", None, True),
    "lame": ("www.lame.lab.", "A", positive(f"www.lame.lab. A {data('lame.lab.')}"),
             "response_lame", "pass_kit_bailiwick", True),
    "timeout": ("www.dead.lab.", "A", {"rcode": "SERVFAIL", "answer": [], "soa": None},
                "timeout", None, False),
}


@pytest.fixture(scope="module")
def handover():
    with Lab() as lab:
        tree = Tree(lab, name="tree-kit-ho", remote=True, delay_ms=DELAY).start()
        bad = tree.start_misbehaving(MISBEHAVING)
        tree.set_record("dn.good.lab.", "DNAME", "other.example.")
        # uplink_forwarding: the kernel follows lab.'s referral to each zone itself (tree.py)
        srv = start_xdns_resolver(lab, tree, name="xdns-kit-ho", xdp="native", uplink=True,
                                  forwarding=True, uplink_forwarding=True, extra=KIT)
        ub = start_unbound(lab, tree)
        yield lab, tree, bad, srv, ub
        assert bad.proc.poll() is None, "the misbehaving server died"
        assert srv.alive(), srv.stderr()[-3000:]
        assert "panicked" not in srv.stderr(), srv.stderr()[-3000:]
        assert stop(lab, srv) == 0, srv.stderr()[-3000:]


def counters(lab, srv) -> dict:
    st = lab.xdns_stats(srv)
    c = dict(st["kit"])
    c.update({f"xdp.{k}": v for k, v in st["xdp"].items() if "kit" in k})
    return c


@pytest.mark.parametrize("case_id", list(CASES))
def test_each_handover_reason_gets_one_right_answer(handover, case_id):
    lab, _, _, srv, ub = handover
    qname, qtype, want, counter, verdict, ask_unbound = CASES[case_id]
    before = counters(lab, srv)
    m, _ = one_answer(lab, srv.addr4, qname, qtype)
    after = counters(lab, srv)
    moved = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
    assert summarize(m) == want, f"{case_id}: {summarize(m)} != {want}\n{m}"
    if ask_unbound:
        q = dns.message.make_query(qname, qtype, use_edns=0, payload=1232)
        w = lab.udp(ub.addr4, q.to_wire(), timeout=8.0)
        theirs = summarize(dns.message.from_wire(w) if w else None)
        assert theirs == want, f"{case_id}: Unbound {theirs} != {want} (the references disagree)"
    assert moved.get("sent", 0) >= 1, f"{case_id}: the kernel sent no query: {moved}"
    assert moved.get(counter, 0) >= 1, f"{case_id}: {counter} did not move: {moved}"
    if verdict:
        assert moved.get(f"xdp.{verdict}", 0) >= 1, f"{case_id}: {verdict} did not move: {moved}"
    assert lab.xdns_stats(srv)["kit_state"]["pending"] == 0


def test_a_full_pending_map_hands_misses_over(handover):
    lab, _, _, srv, ub = handover
    one_answer(lab, srv.addr4, "warm.tarpit.lab.", "A")  # the cut learnt: one kernel query a miss
    time.sleep(0.2)
    before = counters(lab, srv)
    names = [f"p{i}.tarpit.lab." for i in range(8)]
    with cf.ThreadPoolExecutor(max_workers=len(names)) as ex:
        got = dict(zip(names, ex.map(lambda n: ask_all(lab, srv.addr4, n, "A"), names)))
    after = counters(lab, srv)
    moved = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
    bad = {}
    for n, (q, replies) in got.items():
        ms = [dns.message.from_wire(w) for w in replies]
        if len(ms) != 1 or ms[0].id != q.id or summarize(ms[0]) != positive(f"{n} A {TARPIT_A}"):
            bad[n] = [summarize(x) for x in ms]
    assert not bad, bad
    assert moved.get("handover_pending_full", 0) >= 1, f"the map never filled: {moved}"
    assert moved.get("sent", 0) >= 1, moved
    theirs = summarize(dns.message.from_wire(lab.udp(ub.addr4, dns.message.make_query(
        names[0], "A", use_edns=0, payload=1232).to_wire(), timeout=8.0)))
    assert theirs == positive(f"{names[0]} A {TARPIT_A}"), theirs


def metrics(text: str) -> tuple[dict, dict]:
    """(family -> type, sample -> value) of OpenMetrics text."""
    types, samples = {}, {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, fam, typ = line.split(" ", 3)
            types[fam] = typ
        elif line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            samples[name] = float(value)
    return types, samples


def test_kit_metrics_have_the_right_types(handover):
    lab, _, _, srv, _ = handover
    st = lab.xdns_stats(srv)
    text = lab.xdns_metrics(srv).split("\r\n\r\n", 1)[-1]
    types, samples = metrics(text)
    assert types.get("xdns_kit") == "counter", types.get("xdns_kit")
    assert types.get("xdns_kit_state") == "gauge", types.get("xdns_kit_state")
    kit_rows = {re.search(r'counter="([^"]+)"', k).group(1): v for k, v in samples.items()
                if k.startswith("xdns_kit_total{")}
    assert "pending" not in kit_rows and "zones" not in kit_rows, "levels exported as counters"
    for reason in ("response_glueless", "response_cname_out", "response_dname",
                   "response_truncated", "response_servfail", "response_refused",
                   "response_edns_fallback", "response_lame", "timeout",
                   "handover_pending_full"):
        # every reason is a row; `xdns stats` was asked first, so /metrics has at least its count
        assert reason in kit_rows and kit_rows[reason] >= st["kit"][reason], (reason, kit_rows.get(reason), st["kit"])
    assert samples['xdns_kit_state{gauge="pending"}'] == 0
    assert samples['xdns_kit_state{gauge="zones"}'] >= 1
