#!/usr/bin/env python3
"""Writes the seed corpus of the `respond` fuzz target: real queries for every feature of the
engine (answer kinds, EDNS, errors) and malformed messages. Re-run to regenerate."""
import os
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "respond")


def name(text):
    if text == ".":
        return b"\x00"
    out = b""
    for label in text.rstrip(".").split("."):
        out += bytes([len(label)]) + label.encode()
    return out + b"\x00"


def header(id_=0x1234, flags=0x0100, qd=1, an=0, ns=0, ar=0):
    return struct.pack(">HHHHHH", id_, flags, qd, an, ns, ar)


def opt(payload=1232, do=False, version=0, rdata=b""):
    ttl = (version << 16) | (0x8000 if do else 0)
    return b"\x00" + struct.pack(">HHIH", 41, payload, ttl, len(rdata)) + rdata


def q(qname, qtype=1, qclass=1, edns=None, flags=0x0100, id_=0x1234):
    body = name(qname) + struct.pack(">HH", qtype, qclass)
    ar = 0
    if edns is not None:
        body += edns
        ar = 1
    return header(id_, flags, 1, 0, 0, ar) + body


SEEDS = {
    "a-www": q("www.example.com"),
    "aaaa-www-mixed-case": q("WwW.ExAmPlE.CoM", 28),
    "https-www": q("www.example.com", 65),
    "mx-apex-edns": q("example.com", 15, edns=opt()),
    "ns-apex": q("example.com", 2),
    "soa-apex-do": q("example.com", 6, edns=opt(4096, True)),
    "any-apex": q("example.com", 255),
    "any-apex-tcp-size": q("example.com", 255, edns=opt(65535)),
    "txt-escapes": q("txt.example.com", 16),
    "txt-big-no-edns": q("big.example.com", 16),
    "txt-big-edns512": q("big.example.com", 16, edns=opt(512)),
    "txt-big-edns1232": q("big.example.com", 16, edns=opt(1232, True)),
    "srv": q("_sip._udp.example.com", 33),
    "naptr": q("sip.example.com", 35),
    "ptr": q("ptr.example.com", 12),
    "tlsa": q("_443._tcp.www.example.com", 52),
    "svcb": q("_dns.example.com", 64),
    "unknown-type": q("generic.example.com", 65400),
    "cname-chain": q("a.example.com", 1),
    "cname-qtype-cname": q("a.example.com", 5),
    "cname-loop": q("loop1.example.com", 1),
    "cname-out": q("out.example.com", 1),
    "cname-dangling": q("dangling.example.com", 1),
    "wildcard": q("foo.wild.example.com", 1),
    "wildcard-long": q("a" * 63 + "." + "b" * 63 + "." + "c" * 63 + ".wild.example.com", 16),
    "wildcard-cname": q("x.y.wcname.example.com", 1),
    "wildcard-ent-blocked": q("z.y.ent.example.com", 1),
    "ent-nodata": q("y.ent.example.com", 1),
    "nodata": q("www.example.com", 15),
    "nxdomain": q("nope.example.com", 1),
    "nxdomain-long": q("x" * 63 + "." + "y" * 63 + "." + "z" * 60 + ".example.com", 1, edns=opt()),
    "referral-glue": q("sub.example.com", 1),
    "referral-below-cut": q("a.b.sub.example.com", 28),
    "referral-noglue": q("ext.example.com", 1),
    "ds-at-cut": q("sub.example.com", 43),
    "ds-no-ds": q("ext.example.com", 43),
    "other-zone": q("www.example.net", 255),
    "refused-zone": q("www.example.org", 1),
    "refused-class-ch": q("version.bind", 16, 3),
    "axfr": q("example.com", 252),
    "ixfr": q("example.com", 251),
    "badvers": q("www.example.com", 1, edns=opt(1232, False, 1)),
    "edns-cookie": q("www.example.com", 1, edns=opt(1232, False, 0, b"\x00\x0a\x00\x08abcdefgh")),
    "edns-bad-option": q("www.example.com", 1, edns=opt(1232, False, 0, b"\x00\x0a\x00\x09abc")),
    "two-opt": header(ar=2) + name("www.example.com") + b"\x00\x01\x00\x01" + opt() + opt(),
    "qdcount0": header(qd=0),
    "qdcount2": header(qd=2) + (name("www.example.com") + b"\x00\x01\x00\x01") * 2,
    "notimp-notify": q("example.com", 6, flags=0x2000),
    "notimp-update": q("example.com", 6, flags=0x2800),
    "qr-set": q("www.example.com", flags=0x8100),
    "short-header": header()[:11],
    "question-truncated": header() + name("www.example.com")[:-3],
    "question-pointer": header() + b"\x03www\xc0\x0b\x00\x01\x00\x01",
    "question-pointer-loop": header() + b"\xc0\x0c\x00\x01\x00\x01",
    "label-64": header() + b"\x40" + b"a" * 64 + b"\x00\x00\x01\x00\x01",
    "answer-section-in-query": header(an=1) + name("www.example.com") + b"\x00\x01\x00\x01"
    + b"\xc0\x0c\x00\x01\x00\x01\x00\x00\x00\x0a\x00\x04\xc6\x12\x00\x01",
    "count-lies": header(an=3) + name("www.example.com") + b"\x00\x01\x00\x01",
    "trailing-garbage": q("www.example.com") + b"\xde\xad\xbe\xef",
    "root-query": q(".", 2),
    "qtype-0": q("www.example.com", 0),
    "qtype-opt": q("www.example.com", 41),
}


def main():
    os.makedirs(OUT, exist_ok=True)
    for k, v in SEEDS.items():
        with open(os.path.join(OUT, k), "wb") as f:
            f.write(v)
    print(f"{len(SEEDS)} seeds in {OUT}")


if __name__ == "__main__":
    main()
