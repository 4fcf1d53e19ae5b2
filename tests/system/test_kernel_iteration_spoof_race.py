"""Kernel iteration (issue 32): a redundant query raced by forged answers.

The lab's remote tree with one more delegation, made by this test in lab. (`Tree.set_record`):

    race.lab.   NS ns1.race.lab. = the blackhole (reads, never answers)
                NS ns2.race.lab. = the forger (this file, `forger`), both by IPv4 glue only

The kernel follows lab.'s referral and asks one of the two glue addresses at random. When it
asks the blackhole, the daemon sends the same question, `fanout_delay` later, to the forger
(a redundant query: the resolver's own exchange, `kit` group `redundant_sent`). When it asks
the forger, the kernel's own query is the one raced. Either way the forger answers every A
question under race.lab. with, in this order:

1. a forged reply with the wrong ID (ID + 1),
2. one with the right ID from the wrong port (5300),
3. one with the right ID from the wrong server (another address of the tree),
4. one with the right ID and the question's letter case swapped (0x20),
5. one with the right ID and another question name,
   (1-5 carry the poison A POISON_A for the name asked)
6. the genuine answer (A GENUINE for the name asked) with out-of-bailiwick records added: an
   A record of mail.good.lab. (POISON_A) in the answer, an NS record moving good.lab. to the
   forger in the authority section, an A record of ns1.good.lab. (POISON_A) in the additional,
7. the genuine answer alone.

Checked, for every question: exactly one answer to the client, the genuine one, no poison; at
least two redundant queries were sent to the forger and won (`redundant_won`), and the
resolver's exchange rejected the forgeries that reached its socket (`rejected_replies`: ID,
case, question; the wrong port and server never reach a connected socket); the kernel's own
queries to the forger had their forgeries dropped in XDP (`drop_kit_*`). Afterwards none of
the out-of-bailiwick records was cached or followed: mail.good.lab. A, ns1.good.lab. A and
x.ent.good.lab. A (good.lab.'s servers, not the forger) are answered with the tree's data, and
the same race.lab. question again is answered from the cache as it was the first time.

Run as a script (`python3 test_kernel_iteration_spoof_race.py forger A4 OTHER4 GENUINE`) it
is the forger: one line of JSON per query on stdout (source port, name as asked, type).
"""

from __future__ import annotations

import json
import socket
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lab"))

GENUINE = "198.19.83.1"
POISON_A = "198.19.255.66"  # tests/lab/tree.py's POISON_A
KIT = ('kernel_iteration = true\nkernel_iteration_ports = "61000-61063"\n'
       'upstream_timeout_ms = 2000\nfanout = 2\nfanout_delay_ms = 20\n')
KIT_PORTS = range(61000, 61064)
DELAY = {"leaf1": 4.0, "tld-lab": 2.0}  # one-way ms
NAMES = 30  # questions at most: the kernel picks the blackhole half of the time


# ------------------------------------------------------------------ the forger
def forger(a4: str, other4: str, genuine: str) -> None:
    import dns.flags
    import dns.message
    import dns.name
    import dns.rcode
    import dns.rdatatype
    import dns.rrset

    zone = dns.name.from_text("race.lab.")
    main = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    main.bind((a4, 53))
    wrong_port = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    wrong_port.bind((a4, 5300))
    wrong_addr = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    wrong_addr.bind((other4, 53))

    def answer(wire, name, address):
        # from a query parsed afresh: dnspython's responses share the query's question, which
        # the forgeries below change
        r = dns.message.make_response(dns.message.from_wire(wire))
        r.flags |= dns.flags.AA
        r.answer.append(dns.rrset.from_text(name, 300, "IN", "A", address))
        return r

    print(json.dumps({"ready": True}), flush=True)
    while True:
        wire, peer = main.recvfrom(65535)
        try:
            q = dns.message.from_wire(wire)
            qq = q.question[0]
        except Exception:  # noqa: BLE001 - not a query this forger takes
            continue
        print(json.dumps({"port": peer[1], "qname": qq.name.to_text(),
                          "qtype": dns.rdatatype.to_text(qq.rdtype)}), flush=True)
        name = qq.name
        if qq.rdtype != dns.rdatatype.A or name == zone or not name.is_subdomain(zone):
            # not raced: NODATA with the zone's SOA (the apex NS for an NS question); a
            # name elsewhere is poisoned
            r = dns.message.make_response(q)
            r.flags |= dns.flags.AA
            if name == zone and qq.rdtype == dns.rdatatype.NS:
                r.answer.append(dns.rrset.from_text(zone, 300, "IN", "NS", "ns1.race.lab.", "ns2.race.lab."))
            elif name.is_subdomain(zone):
                r.authority.append(dns.rrset.from_text(
                    zone, 300, "IN", "SOA", "ns2.race.lab. hostmaster.race.lab. 1 3600 600 86400 60"))
            elif qq.rdtype == dns.rdatatype.A:
                # a name elsewhere (asked here only if a forged delegation was followed): poison
                r.answer.append(dns.rrset.from_text(name, 300, "IN", "A", POISON_A))
            else:
                r.set_rcode(dns.rcode.REFUSED)
            main.sendto(r.to_wire(), peer)
            continue
        forged = []
        f = answer(wire, name, POISON_A)
        f.id = (q.id + 1) & 0xFFFF
        forged.append((main, f))
        forged.append((wrong_port, answer(wire, name, POISON_A)))
        forged.append((wrong_addr, answer(wire, name, POISON_A)))
        swapped = dns.name.Name([label.swapcase() for label in name.labels])
        f = answer(wire, swapped, POISON_A)
        f.question[0].name = swapped
        forged.append((main, f))
        f = answer(wire, name, POISON_A)
        f.question[0].name = dns.name.Name([b"zz" + name.labels[0]] + list(name.labels[1:]))
        forged.append((main, f))
        oob = answer(wire, name, genuine)
        oob.answer.append(dns.rrset.from_text("mail.good.lab.", 3600, "IN", "A", POISON_A))
        oob.authority.append(dns.rrset.from_text("good.lab.", 3600, "IN", "NS", "ns2.race.lab."))
        oob.additional.append(dns.rrset.from_text("ns1.good.lab.", 3600, "IN", "A", POISON_A))
        forged.append((main, oob))
        forged.append((main, answer(wire, name, genuine)))
        for s, m in forged:
            try:
                s.sendto(m.to_wire(), peer)
            except OSError:
                pass


if __name__ == "__main__" and len(sys.argv) > 1 and sys.argv[1] == "forger":
    forger(*sys.argv[2:5])
    sys.exit(0)


# ------------------------------------------------------------------ the test
import dns.message  # noqa: E402
import dns.rcode  # noqa: E402
import dns.rdatatype  # noqa: E402

from lab import Lab  # noqa: E402
from tree import PY, Tree, start_xdns_resolver, stop  # noqa: E402


def addresses(m) -> list[str]:
    return sorted(r.address for rr in m.answer for r in rr if rr.rdtype == dns.rdatatype.A)


def no_poison(m) -> None:
    text = m.to_text()
    assert POISON_A not in text, f"poison answered to the client:\n{text}"


def forger_log(lab, name: str) -> list[dict]:
    out = Path(lab.dir) / f"{name}.stdout"
    return [json.loads(x) for x in out.read_text().splitlines() if x.strip()] if out.exists() else []


def counters(lab, srv) -> dict:
    st = lab.xdns_stats(srv)
    c = {f"kit.{k}": v for k, v in st["kit"].items()}
    c.update({f"xdp.{k}": v for k, v in st["xdp"].items() if k.startswith("drop_kit_")})
    c["resolver.rejected_replies"] = st["resolver"]["rejected_replies"]
    return c


def test_redundant_query_raced_by_forgeries_takes_only_the_genuine_answer():
    with Lab() as lab:
        tree = Tree(lab, name="tree-kit-race", remote=True, delay_ms=DELAY).start()
        forger4, _ = tree._tree_address()
        other4, _ = tree._tree_address()
        fname = f"{tree.dir.name}-forger"
        proc, _ = lab._spawn(tree.ns, [PY, Path(__file__).resolve(), "forger", forger4, other4, GENUINE],
                             fname)
        deadline = time.monotonic() + 10
        while not forger_log(lab, fname):
            assert proc.poll() is None and time.monotonic() < deadline, \
                (Path(lab.dir) / f"{fname}.stderr").read_text()
            time.sleep(0.05)
        # the delegation, in lab. (served by tld-lab)
        tree.set_record("ns1.race.lab.", "A", tree.addr("blackhole")[0])
        tree.set_record("ns2.race.lab.", "A", forger4)
        tree.set_record("race.lab.", "NS", "ns1.race.lab.", "ns2.race.lab.")
        srv = start_xdns_resolver(lab, tree, name="xdns-kit-race", xdp="native", uplink=True,
                                  forwarding=True, uplink_forwarding=True, extra=KIT)
        try:
            before = counters(lab, srv)
            asked = []
            for i in range(NAMES):
                qname = f"n{i}.race.lab."
                m, _ = lab.ask_once(srv.addr4, qname)
                asked.append((qname, m))
                no_poison(m)
                assert m.rcode() == dns.rcode.NOERROR and addresses(m) == [GENUINE], \
                    f"{qname}:\n{m.to_text()}\nthe forger saw: {forger_log(lab, fname)[-4:]}"
                if counters(lab, srv)["kit.redundant_won"] - before["kit.redundant_won"] >= 2:
                    break
            after = counters(lab, srv)
            moved = {k: after[k] - before.get(k, 0) for k in after}
            log = [x for x in forger_log(lab, fname) if x.get("qtype") == "A"
                   and x["qname"].lower().endswith(".race.lab.")]
            redundant = [x for x in log if x["port"] not in KIT_PORTS]
            kernel = [x for x in log if x["port"] in KIT_PORTS]
            assert moved["kit.redundant_won"] >= 2, f"no redundant query raced in {len(asked)} questions: {moved}"
            assert len(redundant) >= moved["kit.redundant_won"], (redundant, moved)
            # the forgeries reached the redundant query's socket and were rejected there (ID,
            # case, question: 3 each; the wrong port and server are not delivered to it)
            assert moved["resolver.rejected_replies"] >= 3 * moved["kit.redundant_won"], moved
            if kernel:
                # the kernel's own queries to the forger: the forgeries dropped in XDP
                drops = sum(v for k, v in moved.items() if k.startswith("xdp.drop_kit_"))
                assert drops >= 4 * len(kernel), (drops, kernel, moved)
            assert after["kit.timeout"] == before["kit.timeout"], f"nothing waited for the timer: {moved}"
            # nothing out of bailiwick was cached or followed: good.lab.'s own data
            time.sleep(0.2)
            leaf1 = tree.addr("leaf1")[0]
            for qname, want in (("mail.good.lab.", "198.19.10.2"), ("ns1.good.lab.", leaf1),
                                ("x.ent.good.lab.", "198.19.10.5")):
                m, _ = lab.ask_once(srv.addr4, qname)
                no_poison(m)
                assert addresses(m) == [want], m
            seen = len(forger_log(lab, fname))
            # the race.lab. answers as cached: the same again, from the cache (nothing asked)
            for qname, first in asked:
                m, _ = lab.ask_once(srv.addr4, qname, linger=0.05)
                assert addresses(m) == addresses(first) == [GENUINE], (m, first)
            assert len(forger_log(lab, fname)) == seen, "answered from the cache"
        finally:
            assert srv.alive(), srv.stderr()[-3000:]
            assert "panicked" not in srv.stderr(), srv.stderr()[-3000:]
            assert stop(lab, srv) == 0, srv.stderr()[-3000:]
