"""Queries for the resolver comparison (tests/system/test_resolver.py), on the lab tree of
tests/lab/tree.py, with what the tree says the answer is.

Each case: an id, the query (name as sent, exact case; type), and the expected result:
- `rcode`;
- `answer`: the answer section as a set of "owner TYPE rdata" (owners and names in RDATA
  lowercase, no TTL, no class);
- `soa`: for negative answers (NXDOMAIN, NODATA, also after a CNAME), the owner of the SOA in
  the authority section (RFC 2308 section 3: the proof comes with the zone's SOA);
- `needs`: traits a resolver must have for the case to apply (see tree.RESOLVER_TRAITS).

The tree's data addresses (198.19.x.y, 2001:db8:f00d::) never change from run to run; only the
name servers' addresses do, and no case asks for those.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import dns.message
import dns.rcode
import dns.rdatatype


@dataclass(frozen=True)
class Case:
    id: str
    qname: str
    qtype: str
    rcode: str = "NOERROR"
    answer: tuple[str, ...] = ()
    soa: str | None = None
    needs: tuple[str, ...] = ()
    note: str = ""


CASES: list[Case] = [
    # ---- positive answers at a leaf, the apex, and in a TLD
    Case("a-leaf", "www.good.lab.", "A", answer=("www.good.lab. A 198.19.10.1",)),
    Case("aaaa-leaf", "www.good.lab.", "AAAA", answer=("www.good.lab. AAAA 2001:db8:f00d::10",)),
    Case("txt-leaf", "www.good.lab.", "TXT", answer=('www.good.lab. TXT "hello world"',)),
    Case("mx-apex", "good.lab.", "MX", answer=("good.lab. MX 10 mail.good.lab.",)),
    Case("txt-apex", "good.lab.", "TXT", answer=('good.lab. TXT "v=good"',)),
    Case("ns-apex", "good.lab.", "NS", answer=("good.lab. NS ns1.good.lab.",)),
    Case("soa-apex", "good.lab.", "SOA",
         answer=("good.lab. SOA ns1.good.lab. hostmaster.nic.lab. 1 3600 600 86400 60",)),
    Case("a-tld", "www.lab.", "A", answer=("www.lab. A 198.19.1.1",)),
    Case("a-other-tld", "www.other.example.", "A", answer=("www.other.example. A 198.19.20.1",)),
    Case("mixed-case", "wWw.GoOd.LaB.", "A", answer=("www.good.lab. A 198.19.10.1",),
         note="the question comes back in the client's case (checked separately)"),
    # ---- CNAMEs across zones
    Case("cname-cross", "alias.good.lab.", "A",
         answer=("alias.good.lab. CNAME www.other.example.", "www.other.example. A 198.19.20.1")),
    Case("cname-cross-aaaa", "alias.good.lab.", "AAAA",
         answer=("alias.good.lab. CNAME www.other.example.",
                 "www.other.example. AAAA 2001:db8:f00d::20")),
    Case("cname-chain", "chain1.good.lab.", "A",
         answer=("chain1.good.lab. CNAME chain2.other.example.",
                 "chain2.other.example. CNAME chain3.glueless.lab.",
                 "chain3.glueless.lab. CNAME chain4.good.lab.",
                 "chain4.good.lab. A 198.19.10.4"),
         note="three CNAMEs through three zones in two TLDs, one of them glueless"),
    Case("cname-nxdomain", "dangling.good.lab.", "A", rcode="NXDOMAIN",
         answer=("dangling.good.lab. CNAME nothere.other.example.",), soa="other.example."),
    Case("cname-nodata", "alias.good.lab.", "MX",
         answer=("alias.good.lab. CNAME www.other.example.",), soa="other.example."),
    # ---- NXDOMAIN at every level
    Case("nx-root", "nosuchtld.", "A", rcode="NXDOMAIN", soa="."),
    Case("nx-root-deep", "a.b.nosuchtld.", "AAAA", rcode="NXDOMAIN", soa="."),
    Case("nx-tld", "nosuch.lab.", "A", rcode="NXDOMAIN", soa="lab."),
    Case("nx-tld-two-servers", "nosuch.example.", "A", rcode="NXDOMAIN", soa="example."),
    Case("nx-leaf", "nosuch.good.lab.", "A", rcode="NXDOMAIN", soa="good.lab."),
    Case("nx-leaf-deep", "a.b.nosuch.good.lab.", "TXT", rcode="NXDOMAIN", soa="good.lab."),
    # ---- NODATA
    Case("nodata-leaf", "www.good.lab.", "MX", soa="good.lab."),
    Case("nodata-ent", "ent.good.lab.", "A", soa="good.lab.", note="empty non-terminal"),
    Case("nodata-tld", "www.lab.", "AAAA", soa="lab."),
    # ---- wildcards (RFC 4592)
    Case("wild-a", "foo.wild.example.", "A", answer=("foo.wild.example. A 198.19.50.1",)),
    Case("wild-deep-txt", "a.b.wild.example.", "TXT", answer=('a.b.wild.example. TXT "wild"',)),
    Case("wild-nodata", "foo.wild.example.", "MX", soa="wild.example."),
    Case("wild-explicit", "explicit.wild.example.", "A",
         answer=("explicit.wild.example. A 198.19.50.2",)),
    Case("wild-blocked", "a.sub.wild.example.", "A", rcode="NXDOMAIN", soa="wild.example.",
         note="sub.wild.example exists, so *.wild.example does not cover names below it"),
    Case("wild-cname", "x.cname.wild.example.", "A",
         answer=("x.cname.wild.example. CNAME www.good.lab.", "www.good.lab. A 198.19.10.1")),
    # ---- glueless delegations (NS names in the other TLD)
    Case("glueless-lab", "www.glueless.lab.", "A", answer=("www.glueless.lab. A 198.19.30.1",)),
    Case("glueless-example", "www.glueless.example.", "A",
         answer=("www.glueless.example. A 198.19.40.1",)),
    # ---- short TTLs
    Case("short-a", "www.short.lab.", "A", answer=("www.short.lab. A 198.19.70.1",)),
    Case("short-nx", "nosuch.short.lab.", "A", rcode="NXDOMAIN", soa="short.lab."),
    # ---- an unresponsive server in the NS set
    Case("slow-a", "www.slow.lab.", "A", answer=("www.slow.lab. A 198.19.60.1",)),
    Case("slow-nx", "nosuch.slow.lab.", "A", rcode="NXDOMAIN", soa="slow.lab."),
    # ---- the spoofing server (forged replies first, then the genuine one)
    Case("spoof-a", "www.spoof.lab.", "A", answer=("www.spoof.lab. A 198.19.80.1",)),
    Case("spoof-aaaa", "www.spoof.lab.", "AAAA", answer=("www.spoof.lab. AAAA 2001:db8:f00d::80",)),
    Case("spoof-txt", "www.spoof.lab.", "TXT", answer=('www.spoof.lab. TXT "genuine"',)),
    Case("spoof-nx", "nosuch.spoof.lab.", "A", rcode="NXDOMAIN", soa="spoof.lab."),
    Case("spoofonly-a", "www.spoofonly.lab.", "A", answer=("www.spoofonly.lab. A 198.19.81.1",),
         note="the spoofer is the zone's only server"),
    Case("spoofonly-aaaa", "www.spoofonly.lab.", "AAAA",
         answer=("www.spoofonly.lab. AAAA 2001:db8:f00d::81",)),
    Case("spoofonly-nx", "nosuch.spoofonly.lab.", "A", rcode="NXDOMAIN", soa="spoofonly.lab."),
    Case("case-spoof-a", "www.case-spoof.lab.", "A", answer=("www.case-spoof.lab. A 198.19.82.1",),
         needs=("checks_0x20",), note="forged reply differs only in the letter case"),
]

BY_ID = {c.id: c for c in CASES}
assert len(BY_ID) == len(CASES), "duplicate case id"


# ------------------------------------------------------------------ comparison
# What the resolver tests (test_resolver, test_remote_tree, test_kernel_iteration_remote)
# compare of an answer.

NAME_TYPES = {dns.rdatatype.from_text(t) for t in ("NS", "CNAME", "MX", "PTR", "SOA", "SRV")}


def rr_texts(rrset) -> list[str]:
    out = []
    for rd in rrset:
        text = rd.to_text()
        if rrset.rdtype in NAME_TYPES:
            text = text.lower()
        out.append(f"{rrset.name.to_text().lower()} {dns.rdatatype.to_text(rrset.rdtype)} {text}")
    return out


def summarize(m: dns.message.Message | None) -> dict:
    """What the comparison looks at: rcode, answer RRs (no TTL), and the negative proof."""
    if m is None:
        return {"rcode": "no response"}
    answer = sorted(t for rrset in m.answer for t in rr_texts(rrset))
    rcode = dns.rcode.to_text(m.rcode())
    qtype = m.question[0].rdtype if m.question else None
    final = {rrset.rdtype for rrset in m.answer}
    negative = rcode == "NXDOMAIN" or (rcode == "NOERROR" and qtype not in final)
    soa = None
    if negative:
        owners = sorted({rrset.name.to_text().lower() for rrset in m.authority
                         if rrset.rdtype == dns.rdatatype.SOA})
        soa = owners[0] if len(owners) == 1 else (owners or None)
    return {"rcode": rcode, "answer": answer, "soa": soa}
