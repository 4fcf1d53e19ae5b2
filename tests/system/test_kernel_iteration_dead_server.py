"""Kernel iteration (issue 32) and a server that never answers: the lab's remote tree, where
slow.lab.'s glue points at the blackhole (ns1, reads and never answers) and at leaf1 (ns2).
The kernel follows lab.'s referral itself and asks one of the two glue addresses at random,
so some misses go to the blackhole, which has no RTT sample yet.

Checked:
- every question under slow.lab. gets exactly one answer, the right one (www.slow.lab. A,
  NXDOMAIN with slow.lab.'s SOA for the others), within BOUND, well under
  `upstream_timeout` (2 s here): when the kernel's query goes unanswered for `fanout_delay`,
  the daemon sends the same question to another glue address (a redundant query, the
  `kit` group's `redundant_sent`) and its answer wins (`redundant_won`); the client is not
  answered twice and nothing waits for the timeout (`timeout` does not move);
- the blackhole is held down afterwards: three kernel queries lost to a redundant answer
  hold it down (1 s, then growing, as the resolver holds its own), the daemon takes it out of
  the kernel's slow.lab. cut (`held_removed`), and questions meanwhile never go to it (no
  more redundant queries, still answered quickly).
The spoofing rules of the redundant query (ID, port, 0x20 case, server asked) are the
resolver's own exchange's: crates/xdns-resolver's `redundant_queries_follow_the_resolvers_rules`,
and in the lab test_kernel_iteration_spoof_race.py (a redundant query raced by forgeries).
"""

from __future__ import annotations

import dns.rcode
import dns.rdatatype

from lab import Lab
from test_kernel_iteration_remote import kit
from tree import Tree, start_xdns_resolver, stop

DELAY = {"leaf1": 4.0, "tld-lab": 2.0}  # one-way ms
KIT = ('kernel_iteration = true\nkernel_iteration_ports = "61000-61063"\n'
       'upstream_timeout_ms = 2000\nfanout = 2\nfanout_delay_ms = 20\n')
BOUND = 0.6  # s: a redundant query after 20 ms, a 10 ms round trip, a loaded machine


def timed(lab, srv, qname: str, linger: float = 0.3) -> float:
    """One question, answered once and right (nothing more for `linger` s); the time to its
    answer (s)."""
    m, took = lab.ask_once(srv.addr4, qname, linger)
    if qname == "www.slow.lab.":
        assert m.rcode() == dns.rcode.NOERROR, m
        assert [r.address for rr in m.answer for r in rr if rr.rdtype == dns.rdatatype.A] == ["198.19.60.1"], m
    else:
        assert m.rcode() == dns.rcode.NXDOMAIN, m
        assert [rr.name.to_text() for rr in m.authority if rr.rdtype == dns.rdatatype.SOA] == ["slow.lab."], m
    return took


def test_dead_glue_server_is_raced_then_held_down():
    with Lab() as lab:
        tree = Tree(lab, name="tree-kit-dead", remote=True, delay_ms=DELAY).start()
        srv = start_xdns_resolver(lab, tree, name="xdns-kit-dead", xdp="native", uplink=True,
                                  forwarding=True, uplink_forwarding=True, extra=KIT)
        try:
            took = {}
            names = ["www.slow.lab."] + [f"n{i}.slow.lab." for i in range(40)]
            i = 0
            while i < len(names):
                took[names[i]] = timed(lab, srv, names[i])
                i += 1
                if kit(lab, srv)["held_removed"] >= 1:
                    break
            st = kit(lab, srv)
            assert st["held_removed"] >= 1, f"the blackhole was never held down: {st}"
            assert st["redundant_won"] >= 3, st
            assert st["timeout"] == 0, f"no question waited for upstream_timeout: {st}"
            slow = {n: t for n, t in took.items() if t >= BOUND}
            assert not slow, f"answered later than {BOUND} s: {slow}"
            # afterwards, while it is held down (1 s after the third loss, as the resolver
            # holds its own): the kernel no longer asks the blackhole (5 questions: each would
            # go to it half the time if it were still in the cut)
            before = kit(lab, srv)
            later = {}
            for n in [f"after{j}.slow.lab." for j in range(5)]:
                later[n] = timed(lab, srv, n, linger=0.05)
            after = kit(lab, srv)
            assert after["redundant_sent"] == before["redundant_sent"], (before, after)
            assert after["sent"] - before["sent"] >= 5, f"still iterated in the kernel: {before} {after}"
            assert max(later.values()) < BOUND, later
            assert after["timeout"] == 0, after
        finally:
            assert srv.alive(), srv.stderr()[-3000:]
            assert "panicked" not in srv.stderr(), srv.stderr()[-3000:]
            assert stop(lab, srv) == 0, srv.stderr()[-3000:]
