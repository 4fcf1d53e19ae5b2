"""Zone transfers: xdns as a secondary of Knot DNS (issue 28).

A lab of its own (the shared one's XDP fixture would collide with the XDP secondary here).
Knot DNS is the primary, with TSIG and NOTIFY; xdns transfers from it:

- the first AXFR, then a change on Knot (`knotc zone-begin/set/commit`) → NOTIFY → IXFR → the
  new record answered by xdns within 1 s, with and without XDP (with XDP the kernel answers
  it: its answer counter grows);
- a registry's zone (TLD-shaped): delegations added and removed with glue and DS, DS added
  and removed, glue changed, a wildcard added, changed and removed, each made in place in
  the kernel and answered by it;
- nested zones (a parent and a served child below it): a change of either made in place, what
  the parent holds below the child's apex never answered;
- the transferred zone answers the whole differential corpus as the same zone loaded from
  its file does, and a few names as Knot does;
- a wrong TSIG key gets nothing; NOTIFY unsigned, badly signed or from elsewhere is refused
  (NOTAUTH) and counted, signed by the primary it is accepted;
- primary down: the stored copy is served after a restart, then after `expire` the zone
  answers SERVFAIL, and once the primary is back it is served again; expire counts from the
  last contact with a primary (the stored copy's mtime) across restarts, with and without
  XDP (the kernel stops answering an expired zone);
- `xdns zone retransfer` does an AXFR; a 100k-record zone is transferred (timing printed);
- xdns as a primary: NSD, Knot DNS and xdns secondaries serve its zone and follow a reload;
  refusals (address, TSIG), IXFR over UDP (SOA only), AXFR over UDP (NOTIMP);
- a catalog zone (RFC 9432): members added, ignored on a bad schema version, removed; with a
  catalog `file`, members are served from their own stored copies after a restart with the
  primary down, and expire like any secondary zone.
"""

from __future__ import annotations

import base64
import os
import socket
import time
from pathlib import Path

import dns.dnssec
import dns.message
import dns.name
import dns.opcode
import dns.query
import dns.rcode
import dns.rdatatype
import dns.rrset
import dns.tsig
import dns.tsigkeyring
import pytest

import corpus
from lab import KNOT_NSEC3_OPTOUT, REPO, XDNS_BIN, Lab, run, write_knot_conf, write_nsd_conf
from test_differential import summarize

ZONES = REPO / "tests" / "zones"
KEY = ("xfr", "hmac-sha256", base64.b64encode(b"xdns zone transfer test key, 32b").decode())
WRONG = ("xfr", "hmac-sha256", base64.b64encode(b"not the key that Knot knows at all").decode())


@pytest.fixture(scope="module")
def lab():
    with Lab(prefix="xfr") as lab:
        yield lab


def key_toml(key) -> str:
    return f'[[key]]\nname = "{key[0]}"\nalgorithm = "{key[1]}"\nsecret = "{key[2]}"\n'


def secondary_toml(zone: str, primary: str, key=None, file: Path | None = None) -> str:
    t = f'\n[[zone]]\nname = "{zone}"\nprimaries = ["{primary}@53"]\n'
    if key:
        t += f'key = "{key[0]}"\n'
    if file:
        t += f'file = "{file}"\n'
    return t


def ask(lab, addr: str, name: str, rtype: str = "A", tcp: bool = False, timeout: float = 1.0):
    q = dns.message.make_query(name, rtype)
    q.flags = 0
    wire = lab.tcp(addr, q.to_wire(), timeout=timeout) if tcp else lab.udp(addr, q.to_wire(), timeout=timeout)
    return None if wire is None else dns.message.from_wire(wire)


def answer_set(m) -> set[str]:
    return {f"{rr.name} {rr.ttl} {dns.rdatatype.to_text(rr.rdtype)} {rd.to_text().lower()}"
            for rr in m.answer for rd in rr}


def wait_for(what: str, cond, timeout: float, step: float = 0.02):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = cond()
        if last:
            return last
        time.sleep(step)
    raise AssertionError(f"{what}: not within {timeout} s (last: {last!r})")


def zone_stats(lab, srv, zone: str) -> dict:
    for z in lab.xdns_stats(srv)["zones"]:
        if z["name"] == zone:
            return z
    raise AssertionError(f"{zone} not in xdns stats")


def change_in_place(lab, knot, srv, zone: str, sets=(), unsets=(), timeout: float = 5.0) -> dict:
    """Change `zone` on the Knot primary `knot` in one transaction (`zone-unset` each of
    `unsets`, then `zone-set` each of `sets`), wait until `srv` has transferred it, and check
    that it came by IXFR and went into the kernel in place. Returns the zone's transfer stats."""
    n = zone_stats(lab, srv, zone)["transfer"]["transfers"]
    lab.knotc(knot, "zone-begin", zone)
    for u in unsets:
        lab.knotc(knot, "zone-unset", zone, *u)
    for r in sets:
        lab.knotc(knot, "zone-set", zone, *r)
    lab.knotc(knot, "zone-commit", zone)
    wait_for("the IXFR", lambda: zone_stats(lab, srv, zone)["transfer"]["transfers"] > n, timeout)
    lab.wait_xdp_data(srv)
    t = zone_stats(lab, srv, zone)["transfer"]
    assert t["last_transfer"] == "ixfr", t
    assert t["last_kernel_update"].startswith("in place"), t
    return t


def stop_checked(lab, srv, *also) -> None:
    """Stop `srv`, which must still run, must not have panicked and must exit 0; then stop the
    servers in `also` whatever happened."""
    try:
        assert srv.alive(), srv.stderr()[-3000:]
        assert "panicked" not in srv.stderr(), srv.stderr()[-3000:]
        assert lab.stop(srv) == 0, srv.stderr()[-3000:]
    finally:
        for other in also:
            lab.stop(other)


def send_notify(lab, target: str, zone: str, source: str | None, key=None) -> bytes | None:
    """A NOTIFY for `zone` to `target`, from `source` (an address of the server namespace,
    e.g. the primary's) or from the client namespace; TSIG-signed with `key` if given."""
    m = dns.message.make_query(zone, "SOA")
    m.set_opcode(dns.opcode.NOTIFY)
    m.flags |= 0x0400  # AA, as primaries send it
    if key:
        m.use_tsig(dns.tsigkeyring.from_text({key[0]: (key[1], key[2])}), keyname=key[0],
                   algorithm=key[1])
    wire = m.to_wire()
    if source is None:
        r = lab.udp(target, wire)
    else:
        code = ("import socket,sys\n"
                "s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); s.settimeout(2)\n"
                f"s.bind(({source!r},0)); s.sendto(bytes.fromhex({wire.hex()!r}),({target!r},53))\n"
                "sys.stdout.write(s.recvfrom(65535)[0].hex())\n")
        p = lab.server_run(["/usr/bin/python3", "-c", code], check=False)
        r = bytes.fromhex(p.stdout) if p.returncode == 0 and p.stdout else None
    send_notify.last_request = m
    return r


def rcode_of(wire: bytes | None) -> int | None:
    return None if wire is None or len(wire) < 12 else wire[3] & 0x0F


@pytest.fixture(scope="module")
def primary(lab):
    """Knot DNS primary of example.com (the test zone, rich) and example.net, with TSIG and
    NOTIFY to the two xdns secondaries' addresses, reserved here."""
    sec_user = lab.new_address()
    sec_xdp = lab.new_address()
    knot = lab.start_knot_primary(
        [("example.com.", ZONES / "example.com.zone"), ("example.net.", ZONES / "example.net.zone")],
        name="knot-primary", key=KEY, notify=[f"{sec_user[0]}@53", f"{sec_xdp[0]}@53"])
    knot.extra["secondaries"] = {None: sec_user, "default": sec_xdp}
    return knot


@pytest.mark.parametrize("xdp", [None, "default"], ids=["userspace", "xdp"])
def test_secondary_axfr_notify_ixfr(lab, primary, xdp):
    addrs = primary.extra["secondaries"][xdp]
    cache = lab.dir / f"cache-{xdp}"
    extra = key_toml(KEY) + secondary_toml("example.com.", primary.addr4, KEY, cache / "example.com.zone") \
        + secondary_toml("example.net.", primary.addr4, KEY)
    t0 = time.monotonic()
    srv = lab.start_xdns([], name=f"xdns-sec-{xdp}", extra=extra, xdp=xdp, addrs=addrs)
    try:
        lab.wait_answering(srv.addr4, "example.com.", srv.proc)
        lab.wait_answering(srv.addr4, "example.net.", srv.proc)
        first = time.monotonic() - t0
        z = zone_stats(lab, srv, "example.com.")
        t = z["transfer"]
        assert t["source"] == f"axfr from {primary.addr4}:53", t
        assert t["last_transfer"] == "axfr" and t["failures"] == 0, t
        assert z["serial"] == t["serial"] and z["records"] > 50, z
        # the stored copy is written once the new version serves (before the next check)
        wait_for("the stored copy", lambda: (cache / "example.com.zone").is_file(), 10)
        print(f"\n[{xdp}] first AXFR of example.com ({z['records']} records) served after {first:.2f} s "
              f"(transfer {t['last_transfer_ms']} ms)")
        if xdp:
            lab.wait_xdp_data(srv)

        # A few names: the same answers as the primary.
        for name, rtype in [("www.example.com.", "A"), ("example.com.", "MX"), ("example.com.", "NS"),
                            ("www.example.net.", "AAAA"), ("nope.example.com.", "A")]:
            k, x = ask(lab, primary.addr4, name, rtype), ask(lab, srv.addr4, name, rtype)
            assert k.rcode() == x.rcode(), (name, rtype, k, x)
            assert answer_set(k) == answer_set(x), (name, rtype, k, x)

        # A change on Knot: NOTIFY, IXFR, answered within 1 s.
        serial = z["serial"]
        lab.knotc(primary, "zone-begin", "example.com.")
        lab.knotc(primary, "zone-set", "example.com.", f"added-{xdp or 'user'}", "300", "A", "198.18.7.7")
        committed = time.monotonic()  # the clock starts before knotc commits (and Knot notifies)
        lab.knotc(primary, "zone-commit", "example.com.")
        name = f"added-{xdp or 'user'}.example.com."

        def answered():
            m = ask(lab, srv.addr4, name, timeout=0.2)
            return m is not None and m.rcode() == dns.rcode.NOERROR and answer_set(m)
        wait_for(f"{name} answered after NOTIFY", answered, 1.0)
        took = time.monotonic() - committed
        z = zone_stats(lab, srv, "example.com.")
        assert z["serial"] == serial + 1, z
        assert z["transfer"]["last_transfer"] == "ixfr", z["transfer"]
        assert z["transfer"]["source"] == f"ixfr from {primary.addr4}:53", z["transfer"]
        print(f"[{xdp}] knotc zone-commit started → answered by xdns in {took * 1000:.0f} ms "
              f"(IXFR + swap {z['transfer']['last_transfer_ms']} ms)")
        if xdp:
            # the kernel answers the new record: its answer counter grows by our queries
            lab.wait_xdp_data(srv)
            before = lab.xdns_stats(srv)["xdp"]["answered"]
            for _ in range(5):
                m = ask(lab, srv.addr4, name)
                assert answer_set(m) == {f"{name} 300 A 198.18.7.7"}, m
            after = lab.xdns_stats(srv)["xdp"]["answered"]
            assert after - before >= 5, (before, after)
            # ... and took the IXFR in place, not as a new generation of the whole zone set
            t = zone_stats(lab, srv, "example.com.")["transfer"]
            assert t["last_kernel_update"].startswith("in place"), t
            assert (t["kernel_in_place"], t["kernel_full"]) == (1, 0), t

            # A changed address, then a removed name: the kernel answers the new data, in
            # place again, and never the old address once the new one is answered.
            def kernel_answers(qname, want_rcode, want_set):
                before = lab.xdns_stats(srv)["xdp"]["answered"]
                for _ in range(5):
                    m = ask(lab, srv.addr4, qname)
                    assert m.rcode() == want_rcode and answer_set(m) == want_set, m
                after = lab.xdns_stats(srv)["xdp"]["answered"]
                assert after - before >= 5, (before, after)

            lab.knotc(primary, "zone-begin", "example.com.")
            lab.knotc(primary, "zone-unset", "example.com.", "added-default", "A", "198.18.7.7")
            lab.knotc(primary, "zone-set", "example.com.", "added-default", "300", "A", "198.18.7.8")
            lab.knotc(primary, "zone-commit", "example.com.")
            new = {f"{name} 300 A 198.18.7.8"}
            wait_for("the changed address", lambda: answer_set(ask(lab, srv.addr4, name, timeout=0.2)) == new, 1.0)
            kernel_answers(name, dns.rcode.NOERROR, new)
            lab.knotc(primary, "zone-begin", "example.com.")
            lab.knotc(primary, "zone-unset", "example.com.", "added-default")
            lab.knotc(primary, "zone-commit", "example.com.")

            def gone():
                m = ask(lab, srv.addr4, name, timeout=0.2)
                return m is not None and m.rcode() == dns.rcode.NXDOMAIN
            wait_for("the removed name", gone, 1.0)
            kernel_answers(name, dns.rcode.NXDOMAIN, set())
            t = zone_stats(lab, srv, "example.com.")["transfer"]
            assert (t["kernel_in_place"], t["kernel_full"]) == (3, 0), t

        # xdns zone retransfer: an AXFR of the same serial.
        n = zone_stats(lab, srv, "example.com.")["transfer"]["transfers"]
        p = run([XDNS_BIN, "zone", "--control", srv.extra["control"], "retransfer", "example.com."])
        assert p.stdout.strip() == "ok retransfer example.com.", p.stdout
        wait_for("retransfer", lambda: zone_stats(lab, srv, "example.com.")["transfer"]["transfers"] > n, 5)
        assert zone_stats(lab, srv, "example.com.")["transfer"]["last_transfer"] == "axfr"
        p = run([XDNS_BIN, "zone", "--control", srv.extra["control"], "refresh", "nosuch.org."], check=False)
        assert p.returncode == 1 and "not a secondary zone" in p.stderr, p
    finally:
        stop_checked(lab, srv)


def test_tld_ixfr_in_place(lab):
    """A registry's zone (bench/genzone.py's TLD shape, 30,000 records: about 8,000
    delegations without DS, more than the in-place limit of names whose stored bodies would
    carry the SOA): every change a registry makes goes live in the kernel in place, not as a
    new generation, and the kernel answers it: a delegation added with NS, glue and DS (the
    referral below it, its DS), a DS added to a delegation and one removed (the DS NODATA,
    the apex's body rebased), a glue address changed, the delegation removed (NXDOMAIN); a
    wildcard added, changed and removed (its synthesised answers and NODATA)."""
    origin = "tld.test."
    zone = lab.dir / "tld.zone"
    run(["/usr/bin/python3", str(REPO / "bench" / "genzone.py"), "--shape", "tld", "--records", "30000",
         "--origin", origin, "-o", str(zone)])
    text = zone.read_text()
    with_ds = next(ln.split()[0] for ln in text.splitlines() if " IN DS " in ln)
    glued = next(ln.split()[0] for ln in text.splitlines() if ln.startswith("ns1.d") and " IN A " in ln)
    without = next(f"d{i}" for i in range(100) if f"\nd{i} IN DS " not in text)
    sec = lab.new_address()
    knot = lab.start_knot_primary([(origin, zone)], name="knot-tld", notify=[f"{sec[0]}@53"])
    srv = lab.start_xdns([], name="xdns-tld", extra=secondary_toml(origin, knot.addr4), xdp="default", addrs=sec)
    try:
        lab.wait_answering(srv.addr4, origin, srv.proc)

        def kernel_has_zone():
            # the first AXFR reaches the kernel after userspace serves it
            lab.wait_xdp_data(srv)
            before = lab.xdns_stats(srv)["xdp"]["answered"]
            ask(lab, srv.addr4, origin, "SOA", timeout=0.2)
            return lab.xdns_stats(srv)["xdp"]["answered"] > before
        wait_for("the zone in the kernel", kernel_has_zone, 30, step=0.1)

        def in_kernel(qname, rtype, check):
            """Five queries, each passing `check`, all answered by the kernel."""
            before = lab.xdns_stats(srv)["xdp"]["answered"]
            for _ in range(5):
                m = ask(lab, srv.addr4, qname, rtype)
                assert check(m), (qname, rtype, m)
            st = lab.xdns_stats(srv)
            assert st["xdp"]["answered"] - before >= 5, (qname, rtype, {k: v for k, v in st["xdp"].items() if v})

        def change(sets=(), unsets=()):
            return change_in_place(lab, knot, srv, origin, sets, unsets)

        def ds_nodata(m):
            return (m.rcode() == dns.rcode.NOERROR and not m.answer and m.flags & 0x0400
                    and [r.rdtype for r in m.authority] == [dns.rdatatype.SOA])

        def referral(cut):
            return lambda m: (m.rcode() == dns.rcode.NOERROR and not m.answer and not m.flags & 0x0400
                              and any(r.rdtype == dns.rdatatype.NS and r.name.to_text() == cut for r in m.authority))

        def has_ds(m):
            return m.rcode() == dns.rcode.NOERROR and [r.rdtype for r in m.answer] == [dns.rdatatype.DS]

        # before any change: the shared DS NODATA and a DS answer, from the kernel
        in_kernel(f"{without}.{origin}", "DS", ds_nodata)
        in_kernel(f"{with_ds}.{origin}", "DS", has_ds)
        # a delegation added with NS, glue and DS
        new = f"newreg.{origin}"
        change(sets=[(new, "86400", "NS", f"ns1.{new}"), (new, "86400", "NS", f"ns2.{new}"),
                     (f"ns1.{new}", "86400", "A", "198.18.40.1"), (f"ns2.{new}", "86400", "A", "198.18.40.2"),
                     (new, "86400", "DS", "12345", "13", "2", "ab" * 32)])
        in_kernel(f"www.{new}", "A", referral(new))
        in_kernel(new, "DS", has_ds)
        # a DS added, a DS removed
        change(sets=[(f"{without}.{origin}", "86400", "DS", "4242", "13", "2", "cd" * 32)])
        in_kernel(f"{without}.{origin}", "DS", has_ds)
        change(unsets=[(f"{with_ds}.{origin}", "DS")])
        in_kernel(f"{with_ds}.{origin}", "DS", ds_nodata)
        # a glue address changed: the referral carries the new one
        change(unsets=[(f"{glued}.{origin}", "A")], sets=[(f"{glued}.{origin}", "86400", "A", "198.18.41.1")])
        cut = glued.split(".", 1)[1]
        in_kernel(f"x.{cut}.{origin}", "A", lambda m: referral(f"{cut}.{origin}")(m) and any(
            rd.to_text() == "198.18.41.1" for r in m.additional for rd in r))
        # the new delegation removed with its glue: NXDOMAIN
        t = change(unsets=[(new,), (f"ns1.{new}",), (f"ns2.{new}",)])
        in_kernel(f"www.{new}", "A", lambda m: m.rcode() == dns.rcode.NXDOMAIN)
        assert (t["kernel_in_place"], t["kernel_full"]) == (5, 0), t
        # a wildcard added under a new name (an empty non-terminal), its address changed, its
        # NODATA for another type, then removed: each in place, answered by the kernel
        wild, below = f"*.wildtest.{origin}", f"x.y.wildtest.{origin}"

        def synthesised(addr):
            return lambda m: m.rcode() == dns.rcode.NOERROR and answer_set(m) == {f"{below} 86400 A {addr}"}
        change(sets=[(wild, "86400", "A", "198.18.42.1")])
        in_kernel(below, "A", synthesised("198.18.42.1"))
        change(unsets=[(wild, "A")], sets=[(wild, "86400", "A", "198.18.42.2")])
        in_kernel(below, "A", synthesised("198.18.42.2"))
        in_kernel(below, "TXT", lambda m: m.rcode() == dns.rcode.NOERROR and not m.answer
                  and [r.rdtype for r in m.authority] == [dns.rdatatype.SOA])
        t = change(unsets=[(wild,)])
        in_kernel(below, "A", lambda m: m.rcode() == dns.rcode.NXDOMAIN)
        assert (t["kernel_in_place"], t["kernel_full"]) == (8, 0), t
    finally:
        stop_checked(lab, srv, knot)


def do_query(qname: str, rtype: str, do: bool) -> bytes:
    """A query (RD=0, EDNS with a 1232-byte payload, DO as given) in wire format."""
    q = dns.message.make_query(qname, rtype, want_dnssec=do, payload=1232)
    q.flags = 0
    q.id = 4242
    return q.to_wire()


def kernel_answers(lab, srv, qname: str, rtype: str, do: bool = True):
    """Five UDP answers of `srv`, all from the kernel and the same bytes as userspace's TCP
    answer (the header's TC and the OPT record aside: none differ here); the answer."""
    wire = do_query(qname, rtype, do)
    before = lab.xdns_stats(srv)["xdp"]["answered"]
    got = [lab.udp(srv.addr4, wire, timeout=1.0) for _ in range(5)]
    st = lab.xdns_stats(srv)
    assert st["xdp"]["answered"] - before >= 5, (qname, rtype, do, {k: v for k, v in st["xdp"].items() if v})
    user = lab.tcp(srv.addr4, wire)
    assert user is not None and all(g == user for g in got), (qname, rtype, do, got[0], user)
    return dns.message.from_wire(user)


def wait_kernel_zone(lab, srv, origin: str) -> None:
    """Wait until `srv`'s kernel answers `origin`'s SOA."""
    def kernel_has_zone():
        lab.wait_xdp_data(srv)
        before = lab.xdns_stats(srv)["xdp"]["answered"]
        lab.udp(srv.addr4, do_query(origin, "SOA", False), timeout=0.2)
        return lab.xdns_stats(srv)["xdp"]["answered"] > before
    wait_for("the zone in the kernel", kernel_has_zone, 30, step=0.1)


def test_signed_ixfr_in_place(lab):
    """A signed zone's change goes live in the kernel in place (issue 28): Knot signs the zone
    (NSEC) as primary and re-signs what each change touches (the new RRSIGs, the NSEC
    neighbours, the SOA and its RRSIG); userspace applies the IXFR in place (the added RRSIGs
    with their covered TTL, the NSEC chain checked around the change, not validated whole),
    and so does the kernel to its maps, not as a new generation. The zone, 6,000 names, is
    above the kernel's in-place limit (4,096 names): it changes in place because no name's
    stored DO=1 NODATA carries the SOA any more (the kernel writes the apex's SOA part before
    each name's own NSEC part). The kernel answers the new record with DO=1 (its RRSIG) and
    DO=0, and its NODATA with DO=1 (the new serial, the new name's NSEC), byte for byte as
    userspace does over TCP; the record removed, the name is NXDOMAIN again."""
    origin = "signed.test."
    zone = lab.dir / "signed.zone"
    with zone.open("w") as f:
        f.write(f"$ORIGIN {origin}\n$TTL 300\n@ SOA ns1 h 1 3600 600 86400 60\n@ NS ns1\nns1 A 198.18.0.1\n")
        for i in range(6000):
            f.write(f"h{i} A 198.18.{(i >> 8) & 255}.{i & 255}\n")
    sec = lab.new_address()
    knot = lab.start_knot_primary([(origin, zone)], name="knot-signed", notify=[f"{sec[0]}@53"], signing=True)
    srv = lab.start_xdns([], name="xdns-signed", extra=secondary_toml(origin, knot.addr4), xdp="default", addrs=sec)
    try:
        lab.wait_answering(srv.addr4, origin, srv.proc)

        wait_kernel_zone(lab, srv, origin)

        def change(sets=(), unsets=()):
            t = change_in_place(lab, knot, srv, origin, sets, unsets, timeout=10)
            # userspace too: in place, the chain checked around the change, not the whole zone
            assert t["last_apply"].startswith("in place") and "whole" not in t["last_apply"], t
            return t

        def types(section):
            return sorted(dns.rdatatype.to_text(r.rdtype) for r in section)

        # before: a positive DO=1 answer from the kernel
        m = kernel_answers(lab, srv, f"h7.{origin}", "A")
        assert types(m.answer) == ["A", "RRSIG"], m
        new = f"newhost.{origin}"
        serial = ask(lab, srv.addr4, origin, "SOA").answer[0][0].serial
        change(sets=[(new, "300", "A", "198.18.9.9")])
        m = kernel_answers(lab, srv, new, "A")
        assert types(m.answer) == ["A", "RRSIG"] and m.answer[0][0].to_text() == "198.18.9.9", m
        m = kernel_answers(lab, srv, new, "A", do=False)
        assert types(m.answer) == ["A"], m
        # its NODATA with DO=1: the new serial, the new name's NSEC and their RRSIGs
        m = kernel_answers(lab, srv, new, "TXT")
        assert not m.answer and types(m.authority) == ["NSEC", "RRSIG", "RRSIG", "SOA"], m
        soa = next(r for r in m.authority if r.rdtype == dns.rdatatype.SOA)
        assert soa[0].serial > serial, m
        nsec = next(r for r in m.authority if r.rdtype == dns.rdatatype.NSEC)
        assert nsec.name.to_text() == new, m
        # an old name's NODATA carries the new serial too (the apex part, changed in place)
        m = kernel_answers(lab, srv, f"h7.{origin}", "TXT")
        assert next(r for r in m.authority if r.rdtype == dns.rdatatype.SOA)[0].serial == soa[0].serial, m
        # removed: NXDOMAIN (DO=0 from the kernel; DO=1's proof is userspace's)
        t = change(unsets=[(new,)])
        m = kernel_answers(lab, srv, new, "A", do=False)
        assert m.rcode() == dns.rcode.NXDOMAIN, m
        m = ask(lab, srv.addr4, new, "A")
        assert m.rcode() == dns.rcode.NXDOMAIN, m
        assert (t["kernel_in_place"], t["kernel_full"]) == (2, 0), t
    finally:
        stop_checked(lab, srv, knot)


def test_nsec3_ixfr_in_place(lab):
    """An NSEC3-signed zone's change goes live in the kernel in place (issue 28): Knot signs
    the zone with NSEC3 opt-out, as a TLD publishes it, and re-signs what each change touches
    (the new name's NSEC3, the NSEC3 before it in hash order, whose next hashed owner changes,
    the SOA). The IXFR names those hashed owners, not the names whose stored proofs carry
    them: the kernel finds those by their hashes. The new host's name is picked to hash just
    before an insecure delegation (no NSEC3 of its own under opt-out), so that its NSEC3
    becomes the one covering that delegation in its DO=1 referral. After each change the kernel answers,
    byte for byte as userspace over TCP: the new name (DO=1 and DO=0) and its NODATA (its
    NSEC3); the NODATA of the name hashing before it (its NSEC3 now points at the new hash);
    the referral of the insecure delegation (the new NSEC3 covering it, then the old one
    again when the name goes); a new insecure delegation's referral (the apex's NSEC3 and
    the one covering it; the chain does not change) and a new secure one's (DS). Every
    change is made in place."""
    origin = "nsec3.test."
    zone = lab.dir / "nsec3.zone"
    hosts = [f"h{i}" for i in range(3000)]
    delegations = [f"d{i}" for i in range(20)]
    with zone.open("w") as f:
        f.write(f"$ORIGIN {origin}\n$TTL 300\n@ SOA ns1 h 1 3600 600 86400 60\n@ NS ns1\nns1 A 198.18.0.1\n")
        for i, h in enumerate(hosts):
            f.write(f"{h} A 198.18.{(i >> 8) & 255}.{i & 255}\n")
        for d in delegations:
            f.write(f"{d} NS ns.hoster.example.\n")
    sec = lab.new_address()
    knot = lab.start_knot_primary([(origin, zone)], name="knot-nsec3", notify=[f"{sec[0]}@53"], signing=True,
                                  policy=KNOT_NSEC3_OPTOUT)
    srv = lab.start_xdns([], name="xdns-nsec3", extra=secondary_toml(origin, knot.addr4), xdp="default", addrs=sec)

    def hashed(n: str) -> str:
        return dns.dnssec.nsec3_hash(n if n.endswith(".") else f"{n}.{origin}", "", 0, 1).lower()
    # the chain (opt-out: the apex and every name but the insecure delegations), by hash
    chain = sorted(hashed(n) for n in [origin, "ns1", *hosts])

    def before(h: str) -> str:
        """The owner of the chain before hash `h` (the one whose interval holds it)."""
        below = [c for c in chain if c < h]
        return below[-1] if below else chain[-1]

    def name_before(d: str, prefix: str) -> str:
        """A new name `prefix<k>` hashing between `d`'s covering NSEC3 and `d` itself."""
        lo, hi = before(hashed(d)), hashed(d)
        return next(f"{prefix}{k}" for k in range(1_000_000) if lo < hashed(f"{prefix}{k}") < hi)
    try:
        lab.wait_answering(srv.addr4, origin, srv.proc)

        wait_kernel_zone(lab, srv, origin)

        def change(sets=(), unsets=()):
            t = change_in_place(lab, knot, srv, origin, sets, unsets, timeout=10)
            assert t["last_apply"].startswith("in place"), t
            return t

        def nsec3s(m) -> dict[str, str]:
            """The NSEC3 records of the authority section: hashed owner -> next hashed owner."""
            return {r.name.labels[0].decode().lower(): r[0].to_text().split()[4].lower()
                    for r in m.authority if r.rdtype == dns.rdatatype.NSEC3}

        def types(section):
            return sorted(dns.rdatatype.to_text(r.rdtype) for r in section)

        d = delegations[0]
        # a new name hashing before d: its NSEC3 covers d from now on, and the NSEC3 before
        # it (the name hashing there is not in the transfer) points at it
        new = name_before(d, "newhost")
        prev = next(n for n in [origin, "ns1", *hosts] if hashed(n) == before(hashed(new)))
        m = kernel_answers(lab, srv, f"www.{d}.{origin}", "A")
        assert before(hashed(d)) in nsec3s(m), m
        change(sets=[(f"{new}.{origin}", "300", "A", "198.18.9.9")])
        chain = sorted(chain + [hashed(new)])
        m = kernel_answers(lab, srv, f"{new}.{origin}", "A")
        assert types(m.answer) == ["A", "RRSIG"] and m.answer[0][0].to_text() == "198.18.9.9", m
        m = kernel_answers(lab, srv, f"{new}.{origin}", "A", do=False)
        assert types(m.answer) == ["A"], m
        m = kernel_answers(lab, srv, f"{new}.{origin}", "TXT")
        assert not m.answer and types(m.authority) == ["NSEC3", "RRSIG", "RRSIG", "SOA"], m
        assert list(nsec3s(m)) == [hashed(new)], m
        m = kernel_answers(lab, srv, prev if prev.endswith(".") else f"{prev}.{origin}", "TXT")
        assert nsec3s(m)[hashed(prev)] == hashed(new), m
        m = kernel_answers(lab, srv, f"www.{d}.{origin}", "A")
        assert m.authority and hashed(new) in nsec3s(m), m
        # an insecure delegation added: no NSEC3 of its own (opt-out), the chain unchanged;
        # its referral carries the apex's NSEC3 and the one covering it
        change(sets=[(f"newdel.{origin}", "86400", "NS", "ns.hoster.example.")])
        m = kernel_answers(lab, srv, f"www.newdel.{origin}", "A")
        assert types(m.authority) == ["NS", "NSEC3", "NSEC3", "RRSIG", "RRSIG"], m
        assert set(nsec3s(m)) == {hashed(origin), before(hashed("newdel"))}, m
        # a secure one added (its NSEC3 enters the chain): its referral carries its DS
        change(sets=[(f"secdel.{origin}", "86400", "NS", "ns.hoster.example."),
                     (f"secdel.{origin}", "86400", "DS", "12345", "13", "2", "ab" * 32)])
        chain = sorted(chain + [hashed("secdel")])
        m = kernel_answers(lab, srv, f"www.secdel.{origin}", "A")
        assert types(m.authority) == ["DS", "NS", "RRSIG"], m
        # the new name removed: NXDOMAIN, and d is covered by the NSEC3 before it again
        t = change(unsets=[(f"{new}.{origin}",)])
        chain.remove(hashed(new))
        m = kernel_answers(lab, srv, f"{new}.{origin}", "A", do=False)
        assert m.rcode() == dns.rcode.NXDOMAIN, m
        m = kernel_answers(lab, srv, f"www.{d}.{origin}", "A")
        assert before(hashed(d)) in nsec3s(m) and hashed(new) not in nsec3s(m), m
        assert (t["kernel_in_place"], t["kernel_full"]) == (4, 0), t
    finally:
        stop_checked(lab, srv, knot)


def test_nested_zones_ixfr_in_place(lab):
    """A parent zone and a served child zone below it, both transferred from Knot: a change of
    either goes live in the kernel in place (no new generation of the zone set), the child's
    new name is answered by the kernel, and what the parent holds below the child's apex (a
    name the child answers NXDOMAIN for) never reaches the kernel's answers."""
    parent, child = "nest.test.", "child.nest.test."
    head = "$TTL 300\n@ SOA ns1 h 1 7200 3600 1209600 60\n@ NS ns1\nns1 A 198.18.44.1\n"
    pz, cz = lab.dir / "nest.zone", lab.dir / "child.nest.zone"
    pz.write_text(f"$ORIGIN {parent}\n{head}www A 198.18.44.2\nchild NS ns.child\nns.child A 198.18.44.3\n")
    cz.write_text(f"$ORIGIN {child}\n{head}www A 198.18.44.4\n")
    sec = lab.new_address()
    knot = lab.start_knot_primary([(parent, pz), (child, cz)], name="knot-nest", notify=[f"{sec[0]}@53"])
    srv = lab.start_xdns([], name="xdns-nest", extra=secondary_toml(parent, knot.addr4) + secondary_toml(child, knot.addr4),
                         xdp="default", addrs=sec)
    try:
        lab.wait_answering(srv.addr4, parent, srv.proc)
        lab.wait_answering(srv.addr4, child, srv.proc)

        def by_kernel(qname, check):
            lab.wait_xdp_data(srv)
            before = lab.xdns_stats(srv)["xdp"]["answered"]
            for _ in range(5):
                m = ask(lab, srv.addr4, qname, timeout=0.2)
                if m is None or not check(m):
                    return False
            return lab.xdns_stats(srv)["xdp"]["answered"] - before >= 5

        def has(addr):
            return lambda m: m.rcode() == dns.rcode.NOERROR and {rd.to_text() for r in m.answer for rd in r} == {addr}

        def nxdomain(m):
            return m.rcode() == dns.rcode.NXDOMAIN and [r.name.to_text() for r in m.authority] == [child]

        wait_for("both zones in the kernel", lambda: by_kernel(f"www.{child}", has("198.18.44.4"))
                 and by_kernel(f"www.{parent}", has("198.18.44.2")), 30, step=0.1)

        def change(zone, *sets):
            return change_in_place(lab, knot, srv, zone, sets)

        # the child's new name
        change(child, (f"new.{child}", "300", "A", "198.18.44.5"))
        wait_for("the child's new name from the kernel", lambda: by_kernel(f"new.{child}", has("198.18.44.5")), 2)
        # the parent: a new name of its own, and a name below the child's apex it does not answer
        t = change(parent, (f"www2.{parent}", "300", "A", "198.18.44.6"), (f"x.{child}", "300", "A", "198.18.44.7"))
        wait_for("the parent's change from the kernel", lambda: by_kernel(f"www2.{parent}", has("198.18.44.6")), 2)
        assert by_kernel(f"x.{child}", nxdomain), ask(lab, srv.addr4, f"x.{child}")
        assert (t["kernel_in_place"], t["kernel_full"]) == (1, 0), t
        c = zone_stats(lab, srv, child)["transfer"]
        assert (c["kernel_in_place"], c["kernel_full"]) == (1, 0), c
    finally:
        stop_checked(lab, srv, knot)


def test_transferred_zone_answers_as_the_loaded_one(lab, primary):
    """Every corpus query, over UDP and TCP: the secondary's answers equal those of xdns
    serving the same zone from the file (RRs compared as sets: the order inside an RRset is
    the zone file's, which a transfer need not keep)."""
    # The primary's copy, as transferred (the fixture's zone plus whatever earlier tests added).
    sec = lab.start_xdns([], name="xdns-sec-corpus",
                         extra=key_toml(KEY) + secondary_toml("example.com.", primary.addr4, KEY,
                                                              lab.dir / "corpus-copy.zone"))
    try:
        lab.wait_answering(sec.addr4, "example.com.", sec.proc)
        ref = lab.start_xdns([("example.com.", lab.dir / "corpus-copy.zone")], name="xdns-ref-corpus")
        try:
            cases = corpus.build()
            assert len(cases) > 50
            bad = []
            for c in cases:
                for tcp in (False, True):
                    send = lab.tcp if tcp else lab.udp
                    a, b = summarize(send(ref.addr4, c.wire)), summarize(send(sec.addr4, c.wire))
                    if a != b:
                        bad.append((c.id, tcp, a, b))
            assert not bad, f"{len(bad)} differences, first: {bad[0]}"
        finally:
            lab.stop(ref)
    finally:
        assert lab.stop(sec) == 0, sec.stderr()[-3000:]


def test_wrong_key_gets_nothing(lab, primary):
    srv = lab.start_xdns([], name="xdns-wrong-key", wait=False,
                         extra=key_toml(WRONG) + secondary_toml("example.net.", primary.addr4, WRONG))
    try:
        wait_for("control socket", lambda: srv.extra["control"].exists(), 10)
        t = wait_for("a failed refresh", lambda: (lab.xdns_stats(srv)["zones"] or [{}])[0]
                     .get("transfer", {}).get("failures", 0) >= 1 and lab.xdns_stats(srv)["zones"][0]["transfer"],
                     10, step=0.2)
        assert t["transfers"] == 0 and t["serial"] is None, t
        assert "TSIG" in t["last_error"] or "NOTAUTH" in t["last_error"], t
        m = ask(lab, srv.addr4, "www.example.net.")
        assert m is not None and m.rcode() == dns.rcode.REFUSED, m
        assert "refresh failed" in srv.stderr()
    finally:
        assert lab.stop(srv) == 0, srv.stderr()[-3000:]


def test_notify_only_from_primary_and_signed(lab, primary):
    srv = lab.start_xdns([], name="xdns-notify",
                         extra=key_toml(KEY) + secondary_toml("example.net.", primary.addr4, KEY))
    try:
        lab.wait_answering(srv.addr4, "example.net.", srv.proc)
        zone = "example.net."
        # unsigned, from the primary's address
        r = send_notify(lab, srv.addr4, zone, primary.addr4)
        assert rcode_of(r) == dns.rcode.NOTAUTH, r
        # signed with the wrong key: NOTAUTH, TSIG error BADSIG (RFC 8945 §5.2.2)
        r = send_notify(lab, srv.addr4, zone, primary.addr4, WRONG)
        assert rcode_of(r) == dns.rcode.NOTAUTH, r
        with pytest.raises(dns.tsig.PeerBadSignature):
            dns.message.from_wire(r, keyring=False)
        # signed with the right key, from the client (not a primary)
        r = send_notify(lab, srv.addr4, zone, None, KEY)
        assert rcode_of(r) == dns.rcode.NOTAUTH, r
        # for a zone that is not a secondary
        r = send_notify(lab, srv.addr4, "example.org.", primary.addr4, KEY)
        assert rcode_of(r) == dns.rcode.NOTAUTH, r
        assert zone_stats(lab, srv, zone)["transfer"]["notifies_refused"] == 3
        # the real thing: signed, from the primary; answered as a NOTIFY response
        r = send_notify(lab, srv.addr4, zone, primary.addr4, KEY)
        assert rcode_of(r) == dns.rcode.NOERROR, r
        q = send_notify.last_request
        # checked with the key against the request's MAC: a good signature, or this raises
        r = dns.message.from_wire(r, keyring=q.keyring, request_mac=q.mac)
        assert r.had_tsig
        assert r.opcode() == dns.opcode.NOTIFY and r.flags & 0x8000 and r.flags & 0x0400, r
        assert "NOTIFY accepted" in srv.stderr()
    finally:
        assert lab.stop(srv) == 0, srv.stderr()[-3000:]


def expiry_zone(path: Path) -> Path:
    path.write_text("$TTL 60\n@ SOA ns.expiry.test. h.expiry.test. 1 1 1 8 60\n@ NS ns\n"
                    "ns A 198.18.0.53\nwww A 198.18.0.80\n")
    return path


@pytest.mark.parametrize("xdp", [None, "default"], ids=["userspace", "xdp"])
def test_primary_down_stored_copy_then_expiry(lab, xdp):
    tag = xdp or "user"
    src = expiry_zone(lab.dir / f"expiry-{tag}.test.zone")
    knot = lab.start_knot_primary([("expiry.test.", src)], name=f"knot-expiry-{tag}", key=KEY)
    cache = lab.dir / f"expiry-cache-{tag}" / "expiry.test.zone"
    extra = key_toml(KEY) + secondary_toml("expiry.test.", knot.addr4, KEY, cache)
    # with XDP, a zone of its own file beside it shows the kernel answering while the
    # expired one is not
    zones = [("example.net.", ZONES / "example.net.zone")] if xdp else []
    srv = lab.start_xdns(zones, name=f"xdns-expiry-{tag}", extra=extra, wait=False, xdp=xdp)
    lab.wait_answering(srv.addr4, "expiry.test.", srv.proc)
    wait_for("the stored copy", cache.is_file, 10)
    assert lab.stop(srv) == 0
    assert lab.stop(knot) == 0

    # Restart with the primary down: the stored copy answers at once. Its expire counts
    # from its last contact with the primary (the file's mtime): just now.
    contact = stale_copy(cache, 0)
    srv = lab.start_xdns(zones, name=f"xdns-expiry-{tag}-2", extra=extra, wait=False, addrs=(srv.addr4, srv.addr6),
                         xdp=xdp)
    try:
        lab.wait_answering(srv.addr4, "expiry.test.", srv.proc)
        m = ask(lab, srv.addr4, "www.expiry.test.")
        assert answer_set(m) == {"www.expiry.test. 60 A 198.18.0.80"}, m
        t = zone_stats(lab, srv, "expiry.test.")["transfer"]
        assert t["source"] == f"file {cache}", t
        wait_for("a failed refresh", lambda: zone_stats(lab, srv, "expiry.test.")["transfer"]["failures"] >= 1, 5)
        # expire (8 s) without contact: SERVFAIL
        wait_for("SERVFAIL after expire",
                 lambda: (m := ask(lab, srv.addr4, "www.expiry.test.", timeout=0.3)) is not None
                 and m.rcode() == dns.rcode.SERVFAIL, 12, step=0.1)
        assert time.time() - contact >= 7.5
        assert zone_stats(lab, srv, "expiry.test.")["transfer"]["expired"] is True
        assert "zone expired" in srv.stderr()
        if xdp:
            # the expired zone left the kernel maps: userspace answers it SERVFAIL
            kernel_answers_only(lab, srv, "www.example.net.", "www.expiry.test.")
        # the primary is back: served again within the retry interval
        knot = lab.start_knot_primary([("expiry.test.", src)], name=f"knot-expiry-{tag}-2", key=KEY,
                                      addrs=(knot.addr4, knot.addr6))
        wait_for("served again", lambda: (m := ask(lab, srv.addr4, "www.expiry.test.", timeout=0.3)) is not None
                 and m.rcode() == dns.rcode.NOERROR, 5, step=0.1)
        # (the stats say so once the kernel maps are refilled too: with XDP, a moment later)
        wait_for("not expired in the stats",
                 lambda: zone_stats(lab, srv, "expiry.test.")["transfer"]["expired"] is False, 10)
        if xdp:
            # ... and the kernel answers it again once its maps are refilled (after userspace
            # switched back: under load a moment later)
            lab.wait_xdp_data(srv)

            def kernel_answered_one() -> bool:
                was = lab.xdns_stats(srv)["xdp"]["answered"]
                return (rcode_now(lab, srv, "www.expiry.test.") == dns.rcode.NOERROR
                        and lab.xdns_stats(srv)["xdp"]["answered"] - was == 1)
            wait_for("the kernel answering it again", kernel_answered_one, 10, step=0.2)
            before = lab.xdns_stats(srv)["xdp"]["answered"]
            for _ in range(5):
                assert rcode_now(lab, srv, "www.expiry.test.") == dns.rcode.NOERROR
            assert lab.xdns_stats(srv)["xdp"]["answered"] - before == 5
        lab.stop(knot)
    finally:
        assert "panicked" not in srv.stderr(), srv.stderr()[-3000:]
        assert lab.stop(srv) == 0, srv.stderr()[-3000:]


def stale_copy(path: Path, age: float) -> float:
    """Make the stored copy at `path` look last confirmed by a primary `age` seconds ago
    (its mtime); that time."""
    t = time.time() - age
    os.utime(path, (t, t))
    return t


def rcode_now(lab, srv, name: str) -> int | None:
    m = ask(lab, srv.addr4, name, timeout=0.3)
    return None if m is None else m.rcode()


def kernel_answers_only(lab, srv, served: str, expired: str) -> None:
    """With XDP on: five queries for `expired` get SERVFAIL without the kernel answering any,
    five for `served` are all answered by the kernel."""
    lab.wait_xdp_data(srv)
    before = lab.xdns_stats(srv)["xdp"]["answered"]
    for _ in range(5):
        assert rcode_now(lab, srv, expired) == dns.rcode.SERVFAIL
    mid = lab.xdns_stats(srv)["xdp"]["answered"]
    assert mid == before, ("the kernel answered the expired zone", before, mid)
    for _ in range(5):
        assert rcode_now(lab, srv, served) == dns.rcode.NOERROR
    after = lab.xdns_stats(srv)["xdp"]["answered"]
    assert after - mid == 5, ("the kernel did not answer the zone it serves", mid, after)


@pytest.mark.parametrize("xdp", [None, "default"], ids=["userspace", "xdp"])
def test_expire_counts_from_the_last_contact_across_restarts(lab, xdp):
    """RFC 1035 §3.3.13: expire counts from the last successful check of a primary, not from
    the daemon's start. The stored copy's mtime is that contact: every check that finds the
    serial up to date moves it; restarted with the primary down, a copy older than expire is
    not served (SERVFAIL; with XDP the kernel does not answer it), and one younger expires
    when its time since the contact, not since the start, is up. A restart loop no longer
    serves a zone whose primaries are gone forever."""
    tag = xdp or "user"
    src = lab.dir / f"restart-{tag}.test.zone"
    src.write_text("$TTL 60\n@ SOA ns.restart.test. h.restart.test. 1 1 1 3600 60\n@ NS ns\n"
                   "ns A 198.18.0.53\nwww A 198.18.0.80\n")
    knot = lab.start_knot_primary([("restart.test.", src)], name=f"knot-restart-{tag}", key=KEY)
    cache = lab.dir / f"restart-cache-{tag}" / "restart.test.zone"
    extra = key_toml(KEY) + secondary_toml("restart.test.", knot.addr4, KEY, cache)
    # a zone of its own file beside it: the kernel keeps answering that one
    zones = [("example.net.", ZONES / "example.net.zone")]
    srv = lab.start_xdns(zones, name=f"xdns-restart-{tag}", extra=extra, xdp=xdp)
    www = "www.restart.test."
    try:
        lab.wait_answering(srv.addr4, "restart.test.", srv.proc)
        wait_for("the stored copy", cache.is_file, 10)
        # checks that find the serial up to date (refresh 1 s) move the copy's mtime
        m0 = cache.stat().st_mtime
        wait_for("the mtime moved by a check", lambda: cache.stat().st_mtime > m0 + 0.5, 5)
        t = zone_stats(lab, srv, "restart.test.")["transfer"]
        assert t["transfers"] == 1 and t["last_refresh"] >= int(m0), t
    finally:
        assert lab.stop(srv) == 0, srv.stderr()[-3000:]
    assert lab.stop(knot) == 0

    # last contact an hour and a minute ago, expire an hour: not served after a restart
    stale_copy(cache, 3600 + 60)
    srv = lab.start_xdns(zones, name=f"xdns-restart-{tag}-2", extra=extra, xdp=xdp, addrs=(srv.addr4, srv.addr6))
    try:
        assert rcode_now(lab, srv, www) == dns.rcode.SERVFAIL
        t = zone_stats(lab, srv, "restart.test.")["transfer"]
        assert t["expired"] is True and t["source"] == f"file {cache}", t
        assert "the stored copy is older than the SOA expire time" in srv.stderr()
        if xdp:
            kernel_answers_only(lab, srv, "www.example.net.", www)
        # the primary back: served again, the copy's mtime is the new contact
        knot = lab.start_knot_primary([("restart.test.", src)], name=f"knot-restart-{tag}-2", key=KEY,
                                      addrs=(knot.addr4, knot.addr6))
        wait_for("served again", lambda: rcode_now(lab, srv, www) == dns.rcode.NOERROR, 5, step=0.1)
        wait_for("not expired in the stats",
                 lambda: zone_stats(lab, srv, "restart.test.")["transfer"]["expired"] is False, 10)
        assert cache.stat().st_mtime > time.time() - 30
        if xdp:
            lab.wait_xdp_data(srv)
            before = lab.xdns_stats(srv)["xdp"]["answered"]
            for _ in range(5):
                assert rcode_now(lab, srv, www) == dns.rcode.NOERROR
            assert lab.xdns_stats(srv)["xdp"]["answered"] - before == 5
    finally:
        assert "panicked" not in srv.stderr(), srv.stderr()[-3000:]
        assert lab.stop(srv) == 0, srv.stderr()[-3000:]
    assert lab.stop(knot) == 0

    # 8 s of expire left at the restart: it expires 8 s after the restart, not an hour later
    contact = stale_copy(cache, 3600 - 8)
    srv = lab.start_xdns(zones, name=f"xdns-restart-{tag}-3", extra=extra, xdp=xdp, addrs=(srv.addr4, srv.addr6))
    try:
        t = zone_stats(lab, srv, "restart.test.")["transfer"]
        assert abs(t["expires"] - (contact + 3600)) <= 1.5, (t, contact)
        wait_for("SERVFAIL once expire since the contact is up",
                 lambda: rcode_now(lab, srv, www) == dns.rcode.SERVFAIL, 20, step=0.2)
        assert time.time() >= contact + 3600 - 0.5
        assert zone_stats(lab, srv, "restart.test.")["transfer"]["expired"] is True
        if xdp:
            kernel_answers_only(lab, srv, "www.example.net.", www)
    finally:
        assert "panicked" not in srv.stderr(), srv.stderr()[-3000:]
        assert lab.stop(srv) == 0, srv.stderr()[-3000:]


def test_large_axfr(lab):
    """A generated zone of 100k A records, transferred from Knot; prints the time."""
    big = lab.dir / "big.test.zone"
    with big.open("w") as f:
        f.write("$TTL 300\n@ SOA ns.big.test. h.big.test. 1 3600 600 86400 60\n@ NS ns\nns A 198.18.0.53\n")
        for i in range(100_000):
            f.write(f"h{i} A 198.18.{(i >> 8) & 0xff}.{i & 0xff}\n")
    knot = lab.start_knot_primary([("big.test.", big)], name="knot-big")
    t0 = time.monotonic()
    srv = lab.start_xdns([], name="xdns-big", wait=False,
                         extra=secondary_toml("big.test.", knot.addr4))
    try:
        lab.wait_answering(srv.addr4, "big.test.", srv.proc, timeout=60)
        took = time.monotonic() - t0
        z = zone_stats(lab, srv, "big.test.")
        assert z["records"] == 100_003, z
        m = ask(lab, srv.addr4, "h99999.big.test.")
        assert answer_set(m) == {"h99999.big.test. 300 A 198.18.134.159"}, m
        print(f"\nAXFR of 100k records from Knot: served {took:.2f} s after start "
              f"(transfer + validate + swap {z['transfer']['last_transfer_ms']} ms)")
    finally:
        assert lab.stop(srv) == 0, srv.stderr()[-3000:]
        lab.stop(knot)


# ------------------------------------------------------------------ xdns as a primary

NET_ZONE = """$TTL 300
@   SOA ns1.example.net. hostmaster.example.net. {serial} 3600 900 604800 120
    NS  ns1
ns1 A   198.18.1.1
www A   198.18.1.10
    AAAA 2001:db8:1::10
mx  MX  10 www
{extra}"""


def start_nsd_secondary(lab, addrs, primary: str, zone: str, key) -> tuple:
    wd = lab.dir / "nsd-secondary"
    wd.mkdir()
    conf = write_nsd_conf(wd, *addrs, [zone], primary=primary, key=key,
                          allow_notify="198.18.0.0/15", verbosity=2)
    proc = lab.server(["nsd", "-c", conf, "-d"], name="nsd-secondary", cwd=wd)
    return proc, wd


def start_knot_secondary(lab, addrs, primary: str, zone: str, key) -> tuple:
    wd = lab.dir / "knot-secondary"
    (wd / "db").mkdir(parents=True)
    conf = write_knot_conf(wd, *addrs, [zone], primary=primary, key=key,
                           allow_notify="198.18.0.0/15", journal="changes")
    proc = lab.server(["knotd", "-c", conf], name="knot-secondary")
    return proc, wd


def soa_serial(m) -> int | None:
    for rr in m.answer:
        if rr.rdtype == dns.rdatatype.SOA:
            return rr[0].serial
    return None


def test_xdns_primary_feeds_nsd_and_knot(lab):
    import signal as sig
    zone = "example.net."
    zfile = lab.dir / "primary-example.net.zone"
    zfile.write_text(NET_ZONE.format(serial=7, extra=""))
    xa, na, ka, sa = lab.new_address(), lab.new_address(), lab.new_address(), lab.new_address()
    # in one namespace NSD's and Knot's connections come from the veth's first address; an
    # xdns secondary's from its listen address
    allow = ", ".join(f'"{a}"' for a in [lab.client_addr4, lab.server_addr4, sa[0]])
    extra = key_toml(KEY) + (f'\n[[zone]]\nname = "{zone}"\nfile = "{zfile}"\nkey = "{KEY[0]}"\n'
                             f'notify = ["{na[0]}@53", "{ka[0]}@53", "{sa[0]}@53"]\nallow_transfer = [{allow}]\n')
    srv = lab.start_xdns([], name="xdns-primary", extra=extra, addrs=xa)
    # a fleet: xdns fed by xdns (NOTIFY from the primary's listen address, as configured)
    sec = lab.start_xdns([], name="xdns-secondary-of-xdns", addrs=sa,
                         extra=key_toml(KEY) + secondary_toml(zone, xa[0], KEY))
    nsd, nsd_wd = start_nsd_secondary(lab, na, xa[0], zone, KEY)
    knot, knot_wd = start_knot_secondary(lab, ka, xa[0], zone, KEY)
    try:
        lab.wait_answering(xa[0], zone, srv.proc)
        # both secondaries transfer at start and serve the zone
        for who, addr, proc in [("nsd", na[0], nsd), ("knot", ka[0], knot), ("xdns", sa[0], sec.proc)]:
            try:
                lab.wait_answering(addr, zone, proc, timeout=20)
            except (RuntimeError, TimeoutError) as e:
                log = (lab.dir / ("xdns-secondary-of-xdns.stderr" if who == "xdns" else f"{who}-secondary.stderr")).read_text()[-3000:]
                raise AssertionError(f"{who}: {e}\n{log}\n--- xdns ---\n{srv.stderr()[-3000:]}") from None
            m = ask(lab, addr, "www.example.net.")
            assert answer_set(m) == {"www.example.net. 300 A 198.18.1.10"}, (who, m)
            assert soa_serial(ask(lab, addr, zone, "SOA")) == 7, who

        # a new serial on xdns (file edited, SIGHUP): NOTIFY, both follow; Knot by IXFR
        zfile.write_text(NET_ZONE.format(serial=8, extra="new A 198.18.1.99\n"))
        srv.proc.send_signal(sig.SIGHUP)
        t0 = time.monotonic()
        for who, addr in [("nsd", na[0]), ("knot", ka[0]), ("xdns", sa[0])]:
            wait_for(f"{who} serves serial 8",
                     lambda: (m := ask(lab, addr, "new.example.net.", timeout=0.3)) is not None
                     and answer_set(m) == {"new.example.net. 300 A 198.18.1.99"}, 10, step=0.05)
        print(f"\nxdns reload → NSD, Knot and xdns secondaries serve the change after {time.monotonic() - t0:.2f} s")
        t = zone_stats(lab, sec, zone)["transfer"]
        assert t["last_transfer"] == "ixfr" and t["notifies_refused"] == 0, t
        knot_log = (lab.dir / "knot-secondary.stderr").read_text()
        assert "IXFR, incoming" in knot_log, knot_log[-3000:]
        err = srv.stderr()
        assert "NOTIFY answered" in err, err[-3000:]
        assert 'kind="ixfr"' in err, err[-3000:]  # served from the journal, not as AXFR

        # refusals: a client outside allow_transfer (none here: the client is allowed, but
        # unsigned), a wrong key
        q = dns.message.make_query(zone, "AXFR")
        r = lab.tcp(xa[0], q.to_wire())
        assert r is not None and rcode_of(r) == dns.rcode.NOTAUTH, r
        q = dns.message.make_query(zone, "AXFR")
        q.use_tsig(dns.tsigkeyring.from_text({WRONG[0]: (WRONG[1], WRONG[2])}), keyname=WRONG[0], algorithm=WRONG[1])
        r = lab.tcp(xa[0], q.to_wire())
        assert r is not None and rcode_of(r) == dns.rcode.NOTAUTH, r
        # signed: the first message starts with the SOA and verifies
        kr = dns.tsigkeyring.from_text({KEY[0]: (KEY[1], KEY[2])})
        q = dns.message.make_query(zone, "AXFR")
        q.use_tsig(kr, keyname=KEY[0], algorithm=KEY[1])
        r = lab.tcp(xa[0], q.to_wire())
        m = dns.message.from_wire(r, keyring=kr, request_mac=q.mac, multi=True)
        assert m.rcode() == dns.rcode.NOERROR and m.answer[0].rdtype == dns.rdatatype.SOA, m
        # IXFR over UDP: the SOA only (RFC 1995 §2)
        q = dns.message.make_query(zone, "IXFR")
        q.authority.append(dns.rrset.from_text(zone, 0, "IN", "SOA", "ns1.example.net. h.example.net. 7 1 1 1 1"))
        q.use_tsig(kr, keyname=KEY[0], algorithm=KEY[1])
        r = lab.udp(xa[0], q.to_wire())
        m = dns.message.from_wire(r, keyring=kr, request_mac=q.mac)
        assert [rr.rdtype for rr in m.answer] == [dns.rdatatype.SOA] and m.answer[0][0].serial == 8, m
        # AXFR over UDP: NOTIMP
        q = dns.message.make_query(zone, "AXFR")
        r = lab.udp(xa[0], q.to_wire())
        assert rcode_of(r) == dns.rcode.NOTIMP, r
        # the client's IPv6 address is outside allow_transfer: REFUSED, even signed
        q = dns.message.make_query(zone, "AXFR")
        q.use_tsig(kr, keyname=KEY[0], algorithm=KEY[1])
        r = lab.tcp(xa[1], q.to_wire())
        assert rcode_of(r) == dns.rcode.REFUSED, r
        assert "transfer refused: not in allow_transfer" in srv.stderr()
    finally:
        assert lab.stop(sec) == 0, sec.stderr()[-3000:]
        for p in (nsd, knot):
            if p.poll() is None:
                p.terminate()
                p.wait(timeout=10)
        assert "panicked" not in srv.stderr(), srv.stderr()[-3000:]
        assert lab.stop(srv) == 0, srv.stderr()[-3000:]


# ------------------------------------------------------------------ catalog zones

def test_catalog_members_come_and_go(lab):
    cat = lab.dir / "catalog.invalid.zone"
    cat.write_text("$TTL 0\n@ SOA invalid. invalid. 1 3600 600 86400 0\n@ NS invalid.\n"
                   "version TXT \"2\"\nm1.zones PTR example.net.\n")
    org = lab.dir / "example.org.zone"
    org.write_text("$TTL 300\n@ SOA ns.example.org. h.example.org. 1 3600 600 86400 60\n@ NS ns\n"
                   "ns A 198.18.2.1\nwww A 198.18.2.10\n")
    xa = lab.new_address()
    knot = lab.start_knot_primary([("catalog.invalid.", cat), ("example.net.", ZONES / "example.net.zone"),
                                   ("example.org.", org)], name="knot-catalog", key=KEY,
                                  notify=[f"{xa[0]}@53"])
    extra = key_toml(KEY) + (f'\n[[catalog]]\nname = "catalog.invalid."\nprimaries = ["{knot.addr4}@53"]\n'
                             f'key = "{KEY[0]}"\n')
    srv = lab.start_xdns([], name="xdns-catalog", extra=extra, addrs=xa)

    def serves(zone: str) -> bool:
        m = ask(lab, xa[0], zone, "SOA", timeout=0.3)
        return m is not None and m.rcode() == dns.rcode.NOERROR and bool(m.answer)

    def refused(zone: str) -> bool:
        m = ask(lab, xa[0], zone, "SOA", timeout=0.3)
        return m is not None and m.rcode() == dns.rcode.REFUSED

    try:
        wait_for("member example.net. served", lambda: serves("example.net."), 10, step=0.1)
        assert refused("example.org.")
        names = {z["name"] for z in lab.xdns_stats(srv)["zones"]}
        assert names == {"catalog.invalid.", "example.net."}, names

        # a member added on the primary: NOTIFY, the catalog's IXFR, the member's AXFR
        lab.knotc(knot, "zone-begin", "catalog.invalid.")
        lab.knotc(knot, "zone-set", "catalog.invalid.", "m2.zones", "0", "PTR", "example.org.")
        lab.knotc(knot, "zone-commit", "catalog.invalid.")
        wait_for("member example.org. added", lambda: serves("example.org."), 5, step=0.05)
        m = ask(lab, xa[0], "www.example.org.")
        assert answer_set(m) == {"www.example.org. 300 A 198.18.2.10"}, m

        # a catalog of another schema version: ignored, the members stay
        lab.knotc(knot, "zone-begin", "catalog.invalid.")
        lab.knotc(knot, "zone-unset", "catalog.invalid.", "version", "TXT")
        lab.knotc(knot, "zone-set", "catalog.invalid.", "version", "0", "TXT", "\"3\"")
        lab.knotc(knot, "zone-commit", "catalog.invalid.")
        wait_for("catalog serial 3", lambda: zone_stats(lab, srv, "catalog.invalid.")["serial"] == 3, 5)
        wait_for("logged", lambda: "catalog ignored" in srv.stderr(), 2)
        assert serves("example.net.") and serves("example.org.")

        # back to version 2 without example.net.: removed
        lab.knotc(knot, "zone-begin", "catalog.invalid.")
        lab.knotc(knot, "zone-unset", "catalog.invalid.", "version", "TXT")
        lab.knotc(knot, "zone-set", "catalog.invalid.", "version", "0", "TXT", "\"2\"")
        lab.knotc(knot, "zone-unset", "catalog.invalid.", "m1.zones", "PTR")
        lab.knotc(knot, "zone-commit", "catalog.invalid.")
        wait_for("member example.net. removed", lambda: refused("example.net."), 5, step=0.05)
        assert serves("example.org.")
        names = {z["name"] for z in lab.xdns_stats(srv)["zones"]}
        assert names == {"catalog.invalid.", "example.org."}, names
    finally:
        assert "panicked" not in srv.stderr(), srv.stderr()[-3000:]
        assert lab.stop(srv) == 0, srv.stderr()[-3000:]
        lab.stop(knot)


def test_catalog_members_served_from_their_copies_after_a_restart(lab):
    """A catalog with a `file`: each member's last good copy is kept in FILE.members/; after a
    restart with the primary down the members are served from those copies, a copy older than
    its expire since the last contact answers SERVFAIL, and once the primary is back every
    member is served again; a member removed from the catalog has its copy deleted."""
    cat = lab.dir / "catalog2.invalid.zone"
    cat.write_text("$TTL 0\n@ SOA invalid. invalid. 1 1 1 3600 0\n@ NS invalid.\n"
                   "version TXT \"2\"\nm1.zones PTR one.test.\nm2.zones PTR two.test.\n")
    members = {}
    for m in ("one", "two"):
        members[m] = lab.dir / f"{m}.test.zone"
        members[m].write_text(f"$TTL 300\n@ SOA ns.{m}.test. h.{m}.test. 1 1 1 3600 60\n@ NS ns\n"
                              f"ns A 198.18.2.1\nwww A 198.18.2.10\n")
    zones = [("catalog2.invalid.", cat), ("one.test.", members["one"]), ("two.test.", members["two"])]
    knot = lab.start_knot_primary(zones, name="knot-catalog-copies", key=KEY)
    cache = lab.dir / "catalog-copies" / "catalog.zone"
    copies = {m: Path(f"{cache}.members") / f"{m}.test.zone" for m in members}
    extra = key_toml(KEY) + (f'\n[[catalog]]\nname = "catalog2.invalid."\nprimaries = ["{knot.addr4}@53"]\n'
                             f'key = "{KEY[0]}"\nfile = "{cache}"\n')
    xa = lab.new_address()
    srv = lab.start_xdns([], name="xdns-catalog-copies", extra=extra, addrs=xa, wait=False)
    www = {m: f"www.{m}.test." for m in members}
    try:
        for m in members:
            wait_for(f"{m}.test. served", lambda: rcode_now(lab, srv, www[m]) == dns.rcode.NOERROR, 10, step=0.1)
            wait_for(f"{m}.test.'s stored copy", copies[m].is_file, 10)
    finally:
        assert lab.stop(srv) == 0, srv.stderr()[-3000:]
    assert lab.stop(knot) == 0

    # the primary down: both members from their copies
    srv = lab.start_xdns([], name="xdns-catalog-copies-2", extra=extra, addrs=xa, wait=False)
    try:
        for m in members:
            wait_for(f"{m}.test. from its copy", lambda: rcode_now(lab, srv, www[m]) == dns.rcode.NOERROR, 10, step=0.1)
            m_ = ask(lab, xa[0], www[m])
            assert answer_set(m_) == {f"{www[m]} 300 A 198.18.2.10"}, m_
            t = zone_stats(lab, srv, f"{m}.test.")["transfer"]
            assert t["source"] == f"file {copies[m]}" and t["expired"] is False, t
    finally:
        assert "panicked" not in srv.stderr(), srv.stderr()[-3000:]
        assert lab.stop(srv) == 0, srv.stderr()[-3000:]

    # two.test.'s last contact more than its expire ago: SERVFAIL after a restart; one.test.
    # is served; the primary back, both are
    stale_copy(copies["two"], 3600 + 60)
    srv = lab.start_xdns([], name="xdns-catalog-copies-3", extra=extra, addrs=xa, wait=False)
    try:
        wait_for("one.test. from its copy", lambda: rcode_now(lab, srv, www["one"]) == dns.rcode.NOERROR, 10, step=0.1)
        wait_for("two.test. listed", lambda: any(z["name"] == "two.test." for z in lab.xdns_stats(srv)["zones"]), 5)
        assert rcode_now(lab, srv, www["two"]) == dns.rcode.SERVFAIL
        assert zone_stats(lab, srv, "two.test.")["transfer"]["expired"] is True
        knot = lab.start_knot_primary(zones, name="knot-catalog-copies-2", key=KEY, addrs=(knot.addr4, knot.addr6))
        wait_for("two.test. served again", lambda: rcode_now(lab, srv, www["two"]) == dns.rcode.NOERROR, 5, step=0.1)
        assert copies["two"].stat().st_mtime > time.time() - 30

        # one.test. leaves the catalog: not served, its copy deleted
        lab.knotc(knot, "zone-begin", "catalog2.invalid.")
        lab.knotc(knot, "zone-unset", "catalog2.invalid.", "m1.zones", "PTR")
        lab.knotc(knot, "zone-commit", "catalog2.invalid.")
        wait_for("one.test. removed", lambda: rcode_now(lab, srv, www["one"]) == dns.rcode.REFUSED, 5, step=0.1)
        wait_for("its copy deleted", lambda: not copies["one"].exists(), 5)
        assert copies["two"].is_file()
    finally:
        assert "panicked" not in srv.stderr(), srv.stderr()[-3000:]
        assert lab.stop(srv) == 0, srv.stderr()[-3000:]
        lab.stop(knot)
