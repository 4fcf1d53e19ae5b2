"""The query corpus shared by the differential, malformed-input and ops tests.

Every case is (case_id, wire bytes, description). The same bytes go to every server, so the
IDs and the question case are identical and echo can be compared exactly.
Cases are built with dnspython, then patched at the byte level where dnspython cannot express
the query (QDCOUNT=0, two OPT records, ...).
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass

import dns.edns
import dns.flags
import dns.message
import dns.name
import dns.opcode
import dns.rdataclass
import dns.rdatatype


@dataclass(frozen=True)
class Case:
    id: str
    wire: bytes
    what: str


def _qid(case_id: str) -> int:
    return int.from_bytes(hashlib.sha256(case_id.encode()).digest()[:2], "big")


def _query(case_id, qname, qtype, rdclass="IN", edns=None, payload=1232, do=False, rd=True, cd=False):
    m = dns.message.make_query(qname, qtype, rdclass=rdclass, use_edns=False if edns is None else edns,
                               payload=payload, want_dnssec=do)
    m.id = _qid(case_id)
    m.flags = (dns.flags.RD if rd else 0) | (dns.flags.CD if cd else 0)
    return m.to_wire()


# (id suffix, qname relative to example.com., qtype, description)
# Names and types chosen to hit every construct of tests/zones/example.com.zone.
EXAMPLE_COM = [
    ("apex-soa", "@", "SOA", "apex SOA"),
    ("apex-ns", "@", "NS", "apex NS, glue for ns1/ns2 in additional"),
    ("apex-mx", "@", "MX", "MX with case-preserved target, out-of-zone target"),
    ("apex-caa", "@", "CAA", "CAA"),
    ("apex-dnskey", "@", "DNSKEY", "DNSKEY"),
    ("apex-txt", "@", "TXT", "apex TXT"),
    ("apex-a", "@", "A", "NODATA at apex"),
    ("apex-any", "@", "ANY", "ANY at apex"),
    ("apex-ds", "@", "DS", "DS at apex (NODATA: zone is its own parent here)"),
    ("ns1-a", "ns1", "A", "exact A"),
    ("ns1-aaaa", "ns1", "AAAA", "exact AAAA"),
    ("ns1-txt", "ns1", "TXT", "NODATA"),
    ("ns2-a", "ns2", "A", "owner written NS2 in the zone"),
    ("ns2-aaaa", "ns2", "AAAA", "AAAA"),
    ("www-a", "www", "A", "A with TTL 300"),
    ("www-aaaa", "www", "AAAA", "owner written WwW"),
    ("www-https", "www", "HTTPS", "HTTPS"),
    ("www-mx", "www", "MX", "NODATA"),
    ("www-any", "www", "ANY", "ANY at a leaf"),
    ("mail-a", "mail", "A", "owner written Mail"),
    ("mixed-a", "MiXeD.CaSe", "A", "mixed-case owner, mixed-case query"),
    ("mixed-lower-a", "mixed.case", "A", "mixed-case owner, lower-case query"),
    ("case-ns", "case", "A", "empty non-terminal above MiXeD.CaSe: NODATA"),
    ("txt-txt", "txt", "TXT", "TXT escapes and multi-string"),
    ("big-txt", "big", "TXT", "RRset larger than 512 bytes"),
    ("srv", "_sip._udp", "SRV", "SRV"),
    ("udp-ent", "_udp", "A", "empty non-terminal: NODATA"),
    ("naptr", "sip", "NAPTR", "NAPTR"),
    ("sip-a", "sip", "A", "A"),
    ("ptr", "ptr", "PTR", "PTR"),
    ("hinfo", "host", "HINFO", "HINFO"),
    ("sshfp", "host", "SSHFP", "SSHFP"),
    ("tlsa", "_443._tcp.www", "TLSA", "TLSA"),
    ("svcb", "_dns", "SVCB", "SVCB"),
    ("generic", "generic", "TYPE65400", "unknown type (RFC 3597)"),
    ("generic-a", "generic-a", "A", "A written in RFC 3597 form"),
    ("hosts-a", "hosts", "A", "$INCLUDE origin"),
    ("h1-a", "h1.hosts", "A", "$INCLUDE record with TTL 600"),
    ("h1-aaaa", "h1.hosts", "AAAA", "$INCLUDE AAAA"),
    ("h2-a", "h2.hosts", "A", "$INCLUDE default TTL"),
    ("svc-a", "svc", "A", "$ORIGIN change"),
    ("api-svc-a", "api.svc", "A", "$ORIGIN change, child"),
    ("last-a", "last", "A", "after $INCLUDE origin is restored"),
    # CNAME
    ("cname-chain-a", "a", "A", "CNAME chain a -> b -> www"),
    ("cname-chain-aaaa", "a", "AAAA", "CNAME chain to AAAA"),
    ("cname-chain-mx", "a", "MX", "CNAME chain ending in NODATA"),
    ("cname-qtype", "a", "CNAME", "qtype CNAME: no chasing"),
    ("cname-b-a", "b", "A", "one-step CNAME"),
    ("cname-loop", "loop1", "A", "CNAME loop"),
    ("cname-out", "out", "A", "CNAME to another zone served here"),
    ("cname-dangling", "dangling", "A", "CNAME to a nonexistent in-zone name"),
    ("cname-any", "a", "ANY", "ANY at a CNAME"),
    # wildcards
    ("wild-a", "foo.wild", "A", "wildcard A"),
    ("wild-txt", "foo.wild", "TXT", "wildcard TXT"),
    ("wild-aaaa", "foo.wild", "AAAA", "wildcard NODATA"),
    ("wild-deep", "a.b.c.wild", "A", "wildcard several labels deep"),
    ("wild-mixed", "FoO.WiLd", "A", "wildcard with mixed-case qname: synthesized owner echoes case"),
    ("wild-parent", "wild", "A", "parent of the wildcard is an ENT: NODATA"),
    ("wild-literal", "*.wild", "A", "the wildcard owner itself"),
    ("wild-any", "foo.wild", "ANY", "ANY through a wildcard"),
    ("wcname-a", "x.wcname", "A", "wildcard CNAME"),
    ("wcname-cname", "x.wcname", "CNAME", "wildcard CNAME, qtype CNAME"),
    ("wcname-mx", "x.wcname", "MX", "wildcard CNAME to NODATA"),
    ("ent-wild", "z.ent", "A", "wildcard *.ent"),
    ("ent-blocked", "y.ent", "A", "y.ent exists (ENT): wildcard blocked, NODATA"),
    ("ent-below-blocked", "foo.y.ent", "A", "closest encloser y.ent has no wildcard: NXDOMAIN"),
    ("ent-x", "x.y.ent", "A", "exact below an ENT"),
    # DNAME (RFC 6672)
    ("dname-below", "www.dn", "A", "below a DNAME: the DNAME and the synthesised CNAME"),
    ("dname-deep", "a.b.dn", "AAAA", "several labels below a DNAME"),
    ("dname-mixed", "WwW.Dn", "A", "below a DNAME, mixed-case question"),
    ("dname-qtype", "www.dn", "DNAME", "qtype DNAME below a DNAME: substituted too"),
    ("dname-owner", "dn", "DNAME", "the DNAME's owner: ordinary data"),
    ("dname-owner-a", "dn", "A", "the DNAME's owner: NODATA"),
    ("dname-in", "api.dnin", "A", "DNAME into this zone: the new name's answer follows"),
    ("dname-in-nodata", "api.dnin", "MX", "DNAME into this zone, the new name has no MX"),
    ("dname-in-nx", "nosuch.dnin", "A", "DNAME into this zone, the new name does not exist"),
    ("dname-in-apex", "dnin", "A", "owner of a DNAME into this zone: NODATA"),
    ("dname-too-long", "l123456789012345678901234567890123456789012345678901234567890.l123456789012345678901234567890123456789012345678901234567890.dlong", "A", "the substitution would exceed 255 bytes: YXDOMAIN"),
    # NXDOMAIN
    ("nx-a", "nx", "A", "NXDOMAIN"),
    ("nx-aaaa", "nx", "AAAA", "NXDOMAIN"),
    ("nx-deep", "a.b.nx", "A", "NXDOMAIN, several labels"),
    ("nx-any", "nx", "ANY", "NXDOMAIN for ANY"),
    ("nx-below-leaf", "x.www", "A", "below an existing leaf"),
    # delegations
    ("sub-ns", "sub", "NS", "referral with glue"),
    ("sub-a", "sub", "A", "referral at the cut"),
    ("sub-ds", "sub", "DS", "DS at the cut: authoritative answer from the parent"),
    ("sub-below", "www.sub", "A", "name below the cut: referral"),
    ("sub-glue", "ns.sub", "A", "glue name: referral, not an answer"),
    ("sub-below-ds", "x.y.sub", "DS", "DS below the cut: referral"),
    ("sub-any", "sub", "ANY", "ANY at a cut"),
    ("ext-a", "ext", "A", "referral without glue"),
    ("ext-below", "foo.ext", "AAAA", "below a cut without glue"),
    ("ext-ds", "ext", "DS", "unsigned delegation: DS NODATA"),
]

# Types asked at the apex and at www to cover "many types" (answers, NODATA).
MANY_TYPES = ["A", "AAAA", "NS", "SOA", "MX", "TXT", "CNAME", "PTR", "SRV", "DS", "DNSKEY",
              "CAA", "HTTPS", "SVCB", "NAPTR", "TLSA", "SSHFP", "HINFO", "RRSIG", "NSEC",
              "TYPE65400", "TYPE0"]


def _abs(rel: str, origin="example.com.") -> str:
    return origin if rel == "@" else f"{rel}.{origin}"


def build() -> list[Case]:
    cases: list[Case] = []

    def add(cid, wire, what):
        assert cid not in {c.id for c in cases}, cid
        cases.append(Case(cid, wire, what))

    for cid, rel, qt, what in EXAMPLE_COM:
        add(cid, _query(cid, _abs(rel), qt), what)
    for qt in MANY_TYPES:
        cid = f"apex-type-{qt.lower()}"
        add(cid, _query(cid, "example.com.", qt), f"apex {qt}")
        cid = f"www-type-{qt.lower()}"
        add(cid, _query(cid, "www.example.com.", qt), f"www {qt}")

    # EDNS variants (UDP payload drives truncation of big TXT, ANY and DNSKEY/NS answers)
    for payload in (512, 1232, 4096):
        for rel, qt in (("big", "TXT"), ("@", "ANY"), ("@", "NS"), ("www", "A")):
            cid = f"edns{payload}-{rel.strip('@') or 'apex'}-{qt.lower()}"
            add(cid, _query(cid, _abs(rel), qt, edns=0, payload=payload), f"EDNS payload {payload}")
    for rel, qt in (("www", "A"), ("nx", "A"), ("sub", "A"), ("big", "TXT"), ("@", "DNSKEY")):
        cid = f"do-{rel.strip('@') or 'apex'}-{qt.lower()}"
        add(cid, _query(cid, _abs(rel), qt, edns=0, payload=4096, do=True), "EDNS DO=1")
    add("edns-tiny-payload", _query("edns-tiny-payload", "big.example.com.", "TXT", edns=0, payload=100),
        "payload below 512 is treated as 512")
    add("no-rd", _query("no-rd", "www.example.com.", "A", rd=False), "RD=0 echoed")
    add("cd", _query("cd", "www.example.com.", "A", cd=True), "CD=1")

    # mixed case, echoed in the question
    for cid, qn, qt in (("case-www", "wWw.ExAmPlE.cOm.", "A"),
                        ("case-nx", "NX.EXAMPLE.COM.", "A"),
                        ("case-sub", "WWW.Sub.Example.Com.", "A"),
                        ("case-cname", "A.example.COM.", "A"),
                        ("case-apex", "EXAMPLE.com.", "SOA")):
        add(cid, _query(cid, qn, qt), "mixed-case qname echoed")

    # the second zone
    for cid, qn, qt in (("net-soa", "example.net.", "SOA"), ("net-ns", "example.net.", "NS"),
                        ("net-www-a", "www.example.net.", "A"),
                        ("net-www-aaaa", "www.example.net.", "AAAA"),
                        ("net-nx", "nx.example.net.", "A"),
                        ("net-mx2", "mx2.example.net.", "MX")):
        add(cid, _query(cid, qn, qt), "example.net")

    # REFUSED: outside every zone
    for cid, qn, qt in (("refused-org", "www.example.org.", "A"), ("refused-root", ".", "SOA"),
                        ("refused-com", "com.", "NS"), ("refused-parent", "net.", "A"),
                        ("refused-sibling", "example.", "A")):
        add(cid, _query(cid, qn, qt), "outside served zones")

    # classes
    # (version.bind CH TXT is not in the corpus: every server names itself there.)
    add("class-ch-zone", _query("class-ch-zone", "example.com.", "SOA", rdclass="CH"),
        "CHAOS query for a served name")
    add("class-any", _query("class-any", "www.example.com.", "A", rdclass="ANY"), "class ANY")

    # opcodes, header errors, EDNS errors
    base = _query("x", "www.example.com.", "A")
    hdr_rest = base[12:]
    for op in (1, 2, 3, 4, 5):
        cid = f"opcode-{op}"
        flags = (op << 11) | 0x0100
        add(cid, struct.pack("!HHHHHH", _qid(cid), flags, 1, 0, 0, 0) + hdr_rest, f"opcode {op}")
    cid = "qdcount-0"
    add(cid, struct.pack("!HHHHHH", _qid(cid), 0x0100, 0, 0, 0, 0), "no question: FORMERR")
    cid = "qdcount-2"
    q2 = _query("y", "ns1.example.com.", "A")[12:]
    add(cid, struct.pack("!HHHHHH", _qid(cid), 0x0100, 2, 0, 0, 0) + hdr_rest + q2,
        "two questions: FORMERR")
    cid = "qr-set"
    add(cid, struct.pack("!HHHHHH", _qid(cid), 0x8100, 1, 0, 0, 0) + hdr_rest,
        "QR=1 in a query (a response): dropped or FORMERR")
    cid = "badvers"
    m = dns.message.make_query("www.example.com.", "A", use_edns=1)
    m.id = _qid(cid)
    add(cid, m.to_wire(), "EDNS version 1: BADVERS")
    cid = "two-opt"
    w = _query(cid, "www.example.com.", "A", edns=0)
    opt = w[-11:]  # root name, type OPT, class, ttl, rdlen 0
    assert opt[:3] == b"\x00\x00\x29", opt
    w2 = bytearray(w + opt)
    w2[10:12] = (2).to_bytes(2, "big")
    add(cid, bytes(w2), "two OPT records: FORMERR")
    cid = "opt-nonroot"
    w = bytearray(_query(cid, "www.example.com.", "A"))
    w[10:12] = (1).to_bytes(2, "big")
    w += b"\x01x\x00" + b"\x00\x29\x04\xd0\x00\x00\x00\x00\x00\x00"
    add(cid, bytes(w), "OPT with a non-root owner: FORMERR")
    cid = "answer-in-query"
    w = bytearray(_query(cid, "www.example.com.", "A"))
    w[6:8] = (1).to_bytes(2, "big")
    w += b"\xc0\x0c\x00\x01\x00\x01\x00\x00\x00\x3c\x00\x04\xc6\x12\x00\x01"
    add(cid, bytes(w), "query carrying an answer record")
    cid = "axfr-udp"
    add(cid, _query(cid, "example.com.", "AXFR"), "AXFR over UDP")
    cid = "ixfr-udp"
    add(cid, _query(cid, "example.com.", "IXFR"), "IXFR without SOA in authority")
    return cases


CASES = build()
BY_ID = {c.id: c for c in CASES}

# Cases whose answer is certain and simple: used by other tests as a health check.
HEALTH = ["www-a", "cname-chain-a", "wild-a", "nx-a", "sub-below", "refused-org"]
