"""A scriptable authoritative server that misbehaves on purpose, for the resolver tests that
must see a server answer TC=1, SERVFAIL, REFUSED, FORMERR to EDNS, or a lame referral.

    python3 misbehave.py ADDR4 ADDR6 ZONE=MODE [ZONE=MODE ...]

It serves each ZONE (listening on UDP and TCP port 53 of both addresses) with made-up data:
the apex SOA and NS (`ns1.ZONE`, whose A and AAAA are ADDR4 and ADDR6), every other name an A
record `198.19.84.K` (K: the zone's position on the command line, from 1) and no other type
(NODATA with the SOA). Answers are authoritative and echo the question as asked (0x20 case
kept), with an OPT record when the query had one. The MODE says when it misbehaves instead:

    servfail   SERVFAIL to every query to ADDR4 (ADDR6 answers well)
    refused    REFUSED to every query to ADDR4 (ADDR6 answers well)
    lame       to ADDR4: NOERROR, not authoritative, no answer, an upward referral (NS of the
               parent, `lab.` -> ns1.nic.lab.): a server that does not serve the zone
    formerr    FORMERR (the question echoed, no OPT) to every query with an OPT record, on
               both addresses (a server from before EDNS, RFC 6891 section 7); answers well
               without OPT
    tc         TC=1 with no records to every UDP query, on both addresses; answers well over TCP

A name outside every zone gets REFUSED. One line of JSON per query on stdout (address, port,
transport, name as asked, type, EDNS or not, what it did), so a test can see who asked what.
"""

from __future__ import annotations

import json
import socket
import sys
import threading

import dns.flags
import dns.message
import dns.name
import dns.rcode
import dns.rdatatype
import dns.rrset

from tree import recv_n  # noqa: E402  (run from tests/lab: the tree's other servers' reader)

MODES = ("servfail", "refused", "lame", "formerr", "tc")


def data_address(k: int) -> str:
    """The A record every other name of the k-th zone (from 1) answers."""
    return f"198.19.84.{k}"


class Server:
    def __init__(self, a4: str, a6: str, zones: list[tuple[str, str]]):
        self.a4, self.a6 = a4, a6
        self.zones = [(dns.name.from_text(z), m, k + 1) for k, (z, m) in enumerate(zones)]
        for _, m, _ in self.zones:
            if m not in MODES:
                raise ValueError(f"unknown mode {m} (one of {MODES})")
        self.lock = threading.Lock()

    def log(self, **kw) -> None:
        with self.lock:
            print(json.dumps(kw), flush=True)

    def zone_of(self, name: dns.name.Name):
        best = None
        for z, m, k in self.zones:
            if name.is_subdomain(z) and (best is None or len(z) > len(best[0])):
                best = (z, m, k)
        return best

    def answer(self, wire: bytes, local: str, tcp: bool) -> bytes | None:
        try:
            q = dns.message.from_wire(wire)
        except Exception:  # noqa: BLE001 - not a query this server takes
            return None
        if q.flags & dns.flags.QR or len(q.question) != 1:
            return None
        qq = q.question[0]
        edns = q.edns >= 0
        z = self.zone_of(qq.name)
        did = "answer"
        r = dns.message.make_response(q)
        if z is None:
            r.set_rcode(dns.rcode.REFUSED)
            did = "not ours"
        else:
            zone, mode, k = z
            v4 = ":" not in local
            if mode in ("servfail", "refused") and v4:
                r.set_rcode(dns.rcode.SERVFAIL if mode == "servfail" else dns.rcode.REFUSED)
                did = mode
            elif mode == "lame" and v4:
                r.authority.append(dns.rrset.from_text("lab.", 3600, "IN", "NS", "ns1.nic.lab."))
                did = mode
            elif mode == "formerr" and edns:
                r = dns.message.make_response(q)
                r.use_edns(False)
                r.set_rcode(dns.rcode.FORMERR)
                did = mode
            elif mode == "tc" and not tcp:
                r.flags |= dns.flags.TC | dns.flags.AA
                did = mode
            else:
                r.flags |= dns.flags.AA
                self.fill(r, qq, zone, k)
        self.log(local=local, tcp=tcp, qname=qq.name.to_text(), qtype=dns.rdatatype.to_text(qq.rdtype),
                 edns=edns, did=did)
        return r.to_wire()

    def fill(self, r, qq, zone, k: int) -> None:
        name, t = qq.name, qq.rdtype
        soa = dns.rrset.from_text(zone, 300, "IN", "SOA",
                                  f"ns1.{zone} hostmaster.{zone} 1 3600 600 86400 60")
        ns1 = dns.name.from_text("ns1", zone)
        if name == zone and t == dns.rdatatype.SOA:
            r.answer.append(soa)
        elif name == zone and t == dns.rdatatype.NS:
            r.answer.append(dns.rrset.from_text(name, 300, "IN", "NS", ns1.to_text()))
        elif name == ns1 and t in (dns.rdatatype.A, dns.rdatatype.AAAA):
            a = self.a4 if t == dns.rdatatype.A else self.a6
            r.answer.append(dns.rrset.from_text(name, 300, "IN", dns.rdatatype.to_text(t), a))
        elif name != zone and name != ns1 and t == dns.rdatatype.A:
            r.answer.append(dns.rrset.from_text(name, 300, "IN", "A", data_address(k)))
        else:
            r.authority.append(soa)

    def serve_udp(self, addr: str) -> None:
        fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
        s = socket.socket(fam, socket.SOCK_DGRAM)
        s.bind((addr, 53))
        while True:
            wire, peer = s.recvfrom(65535)
            out = self.answer(wire, addr, False)
            if out is not None:
                s.sendto(out, peer)

    def serve_tcp(self, addr: str) -> None:
        fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
        ls = socket.socket(fam, socket.SOCK_STREAM)
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind((addr, 53))
        ls.listen(64)
        while True:
            c, _ = ls.accept()
            threading.Thread(target=self.tcp_conn, args=(addr, c), daemon=True).start()

    def tcp_conn(self, addr: str, c: socket.socket) -> None:
        with c:
            c.settimeout(10)
            try:
                while True:
                    n = int.from_bytes(recv_n(c, 2), "big")
                    out = self.answer(recv_n(c, n), addr, True)
                    if out is None:
                        return
                    c.sendall(len(out).to_bytes(2, "big") + out)
            except (OSError, ValueError):
                return


def main(argv: list[str]) -> int:
    if len(argv) < 3 or any("=" not in z for z in argv[2:]):
        print(__doc__)
        return 2
    srv = Server(argv[0], argv[1], [tuple(z.split("=", 1)) for z in argv[2:]])
    threads = []
    for a in (srv.a4, srv.a6):
        for f in (srv.serve_udp, srv.serve_tcp):
            t = threading.Thread(target=f, args=(a,), daemon=True)
            t.start()
            threads.append(t)
    srv.log(ready=True)
    for t in threads:
        t.join()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
