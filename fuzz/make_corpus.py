#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets: `respond` (real queries for every feature of the
engine: answer kinds, EDNS, errors; and malformed messages), `reply` (upstream replies of every
class the resolver tells apart, compressed as servers send them, and malformed ones) and
`zone_spans` (master-file text with every construct the loader's pre-scanner splits on).
Re-run to regenerate; the corpora are committed and replayed by `cargo test`."""
import os
import struct

CORPUS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
OUT = os.path.join(CORPUS, "respond")


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


# ---- reply: upstream replies (what the resolver's parser and classifier read) -------------

A, NS, CNAME, SOA, PTR, MX, TXT, AAAA, DNAME, OPT = 1, 2, 5, 6, 12, 15, 16, 28, 39, 41
QR, AA, TC = 0x8000, 0x0400, 0x0200


def rr(owner, rtype, rdata, ttl=300, rclass=1):
    """owner: wire bytes (a name or a pointer)."""
    return owner + struct.pack(">HHIH", rtype, rclass, ttl, len(rdata)) + rdata


def ptr(off):
    return struct.pack(">H", 0xC000 | off)


def soa_rdata(mname=b"\x02ns\xc0\x0c", rname=b"\x04host\xc0\x0c", minimum=300):
    return mname + rname + struct.pack(">IIIII", 2026112701, 7200, 3600, 1209600, minimum)


def reply(qname, qtype, flags, an=(), ns=(), ar=(), id_=0xBEEF, qd=1):
    """A reply to `qname` (written at offset 12, so pointers to 12 name it)."""
    h = struct.pack(">HHHHHH", id_, flags, qd, len(an), len(ns), len(ar))
    return h + name(qname) + struct.pack(">HH", qtype, 1) + b"".join(an) + b"".join(ns) + b"".join(ar)


Q = ptr(12)  # the question name
IP1 = bytes([198, 18, 0, 1])
IP6 = bytes.fromhex("20010db8000000000000000000000001")
# In a reply to www.example.test: offset 12 "www", 16 "example", 24 "test".
EX = ptr(16)
TEST = ptr(24)

REPLY_SEEDS = {
    "answer-a": reply("www.example.test", A, QR | AA, an=[rr(Q, A, IP1)]),
    "answer-a-0x20": reply("wWw.ExAmple.TeSt", A, QR | AA, an=[rr(Q, A, IP1)]),
    "answer-aaaa-edns": reply("www.example.test", AAAA, QR | AA, an=[rr(Q, AAAA, IP6)],
                              ar=[opt()]),
    "answer-any": reply("www.example.test", 255, QR | AA,
                        an=[rr(Q, A, IP1), rr(Q, TXT, b"\x05hello"), rr(Q, MX, b"\x00\x0a\x04mail" + EX)]),
    "cname-chain": reply("www.example.test", A, QR | AA,
                         an=[rr(Q, CNAME, b"\x04mail" + EX), rr(ptr(46), A, IP1)]),
    "cname-out-of-zone": reply("www.example.test", A, QR | AA,
                               an=[rr(Q, CNAME, name("www.other.net"))]),
    "cname-nxdomain": reply("www.example.test", A, QR | AA | 3,
                            an=[rr(Q, CNAME, b"\x04gone" + EX)], ns=[rr(EX, SOA, soa_rdata())]),
    "dname": reply("www.old.example.test", A, QR | AA,
                   an=[rr(ptr(16), DNAME, b"\x03new" + ptr(20)),
                       rr(Q, CNAME, b"\x03www\x03new" + ptr(20)),
                       rr(name("www.new.example.test"), A, IP1)]),
    "nxdomain-soa": reply("nx.example.test", A, QR | AA | 3, ns=[rr(ptr(15), SOA, soa_rdata(minimum=60))]),
    "nodata-soa": reply("www.example.test", MX, QR | AA, ns=[rr(EX, SOA, soa_rdata())]),
    "nodata-soa-uncompressed": reply("www.example.test", MX, QR | AA,
                                     ns=[rr(name("example.test"), SOA,
                                            soa_rdata(name("ns.example.test"), name("host.example.test")))]),
    "referral-glue": reply("www.example.test", A, QR,
                           ns=[rr(EX, NS, b"\x03ns1" + EX), rr(EX, NS, b"\x03ns2" + EX),
                               rr(EX, NS, name("ns.other.net"))],
                           ar=[rr(name("ns1.example.test"), A, IP1), rr(name("ns1.example.test"), AAAA, IP6),
                               rr(name("ns2.example.test"), A, IP1), opt()]),
    "referral-from-root": reply("www.example.test", A, QR,
                                ns=[rr(TEST, NS, b"\x01a\x03nic" + TEST)],
                                ar=[rr(b"\x01a\x03nic" + TEST, A, IP1)]),
    "referral-upward": reply("www.example.test", A, QR, ns=[rr(b"\x00", NS, name("a.root-servers.net"))]),
    "priming": reply(".", NS, QR | AA,
                     an=[rr(b"\x00", NS, name("a.root-servers.net")), rr(b"\x00", NS, name("b.root-servers.net"))],
                     ar=[rr(name("a.root-servers.net"), A, IP1), rr(name("b.root-servers.net"), AAAA, IP6)]),
    "ptr": reply("1.0.18.198.in-addr.arpa", PTR, QR | AA, an=[rr(Q, PTR, name("host.example.test"))]),
    "truncated-tc": reply("www.example.test", A, QR | TC),
    "servfail": reply("www.example.test", A, QR | 2),
    "refused": reply("www.example.test", A, QR | 5),
    "badvers-ext-rcode": reply("www.example.test", A, QR, ar=[b"\x00" + struct.pack(">HHIH", OPT, 1232, 1 << 24, 0)]),
    "ttl-top-bit": reply("www.example.test", A, QR | AA, an=[rr(Q, A, IP1, ttl=0x80000001)]),
    "class-ch-skipped": reply("www.example.test", A, QR | AA, an=[rr(Q, TXT, b"\x02hi", rclass=3), rr(Q, A, IP1)]),
    "qr-clear": reply("www.example.test", A, AA, an=[rr(Q, A, IP1)]),
    "qdcount-0": reply("www.example.test", A, QR, qd=0),
    "qdcount-2": reply("www.example.test", A, QR, qd=2),
    "question-pointer": struct.pack(">HHHHHH", 0xBEEF, QR, 1, 0, 0, 0) + b"\xc0\x0c\x00\x01\x00\x01",
    "pointer-forward-in-rdata": reply("www.example.test", NS, QR | AA, an=[rr(Q, NS, ptr(200))]),
    "pointer-loop-owner": reply("www.example.test", A, QR | AA, an=[rr(ptr(34), A, IP1)]),
    "rdlen-past-end": reply("www.example.test", A, QR | AA, an=[rr(Q, A, IP1)])[:-2],
    "soa-short": reply("www.example.test", A, QR | AA | 3, ns=[rr(EX, SOA, soa_rdata()[:-4])]),
    "mx-no-exchange": reply("www.example.test", MX, QR | AA, an=[rr(Q, MX, b"\x00\x0a")]),
    "counts-lie": struct.pack(">HHHHHH", 0xBEEF, QR | AA, 1, 40, 40, 40) + name("www.example.test") + b"\x00\x01\x00\x01",
    "header-only": struct.pack(">HHHHHH", 0xBEEF, QR, 1, 0, 0, 0),
    "empty": b"",
}

# ---- zone_spans: master-file text (what the zone loader's pre-scanner splits) ----------------

SPAN_SEEDS = {
    "plain": b"$ORIGIN example.com.\n$TTL 3600\n@ IN SOA ns host 1 2 3 4 5\n@ NS ns\nns A 198.18.0.1\n",
    "soa-parens": b"@ 3600 IN SOA ns.example.com. host.example.com. (\n  2026112701 ; serial\n"
                  b"  7200 3600\n  1209600 300 )\n  NS ns\n",
    "indented-owner": b"www A 198.18.0.1\n    AAAA 2001:db8::1\n\tTXT \"tab\"\n",
    "quotes-escapes": b'txt TXT "a;b" "c(d" "e\\"f" "g\\\\" \\040x ; comment ( here\nnext A 1.2.3.4\n',
    "quoted-newline": b'q TXT "line one\nline two"\nr A 1.2.3.4\n',
    "escaped-newline": b"a TXT x\\\ny\nb A 1.2.3.4\n",
    "comments-only": b"; only\n;; comments ( and\n\n   ; parens )\n",
    "crlf": b"$TTL 60\r\n@ SOA a b 1 2 3 4 5\r\nwww A 1.2.3.4\r\n",
    "directives": b"$TTL 1h\n$TTL 300 ; five minutes\n$INCLUDE sub.inc sub.example.com.\n$GENERATE 1-4 h$ A 1.2.3.$\n$origin lower.\n",
    "unbalanced-open": b"@ SOA a b ( 1 2 3\n4 5\nwww A 1.2.3.4\n",
    "unbalanced-close": b"www A 1.2.3.4 )\n) x\nz A 1.2.3.4\n",
    "unterminated-quote": b'a TXT "no end\nb A 1.2.3.4\n',
    "backslash-at-end": b"a TXT x\\",
    "no-final-newline": b"a A 1.2.3.4",
    "generic-rdata": b"g TYPE65400 \\# 4 0a000001\nh CAA 0 issue \"ca.example\"\n",
    "blank-lines": b"\n\n  \n\t\na A 1.2.3.4\n\n",
    "dollar-mid-line": b"a TXT $notadirective\n  $TTL 5\n",
    "binary": bytes(range(256)),
}


def write(dirname, seeds):
    out = os.path.join(CORPUS, dirname)
    os.makedirs(out, exist_ok=True)
    for k, v in seeds.items():
        with open(os.path.join(out, k), "wb") as f:
            f.write(v)
    print(f"{len(seeds)} seeds in {out}")


def main():
    write("respond", SEEDS)
    write("reply", REPLY_SEEDS)
    write("zone_spans", SPAN_SEEDS)


if __name__ == "__main__":
    main()
