"""Kernel zone maps that grow in process (issues 28 and 30).

The XDP maps are sized at start for the zones of the day: nothing, for a secondary without a
stored copy. Zone data that outgrows them is installed into the program loaded again with
larger zone maps (every other map reused) and the XDP link switched to it atomically, while
the old data answers: no restart, no query lost, and the kernel answers the new data.

- a secondary of a Knot DNS primary, without a stored copy, beside a small zone file (so
  that the program is loaded at start, its maps sized for that small zone), transfers a zone
  of 60,000 records: after the transfer the kernel answers it (its `answered` counter rises
  by the queries asked) with the bytes userspace gives over TCP;
- a secondary with no zone at all at start (no stored copy, no zone file) does not load the
  program at start: nothing is attached and userspace answers until the first transfer is
  served; then the program is loaded once, sized for that zone (no growth), and the kernel
  answers it;
- a file-backed zone reloaded (SIGHUP) from a few records to 60,000 while a client queries
  throughout: no query is lost, every answer is the old data or the new, and afterwards the
  kernel answers the new names.

A lab of its own (one XDP xdns per lab interface).
"""

from __future__ import annotations

import shutil
import signal
import time

import dns.message
import dns.rcode
import dns.rdatatype
import pytest

from lab import ZONES_DIR, Lab
from watch import AnswerWatcher

RECORDS = 60_000


@pytest.fixture(scope="module")
def lab():
    with Lab(prefix="grow") as lab:
        yield lab


def big_zone(path, origin: str, serial: int, names: int) -> None:
    """`names` A records `h<i>` under `origin`, plus SOA, NS and the server's A."""
    with path.open("w") as f:
        f.write(f"$ORIGIN {origin}\n$TTL 300\n@ SOA ns h {serial} 3600 600 86400 60\n@ NS ns\n"
                "ns A 198.18.0.53\n")
        for i in range(names):
            f.write(f"h{i} A 198.18.{(i >> 8) & 0xff}.{i & 0xff}\n")


def address(i: int) -> str:
    return f"198.18.{(i >> 8) & 0xff}.{i & 0xff}"


def query(name: str, qid: int = 0x4242) -> bytes:
    q = dns.message.make_query(name, "A")
    q.id = qid
    q.flags = 0
    return q.to_wire()


def first_a(wire: bytes | None) -> tuple[str | None, str | None]:
    if wire is None:
        return None, None
    m = dns.message.from_wire(wire)
    addrs = [rd.address for rrset in m.answer if rrset.rdtype == dns.rdatatype.A for rd in rrset]
    return dns.rcode.to_text(m.rcode()), (addrs[0] if addrs else None)


def kernel_answered(lab, srv) -> int:
    return lab.xdns_stats(srv)["xdp"].get("answered", 0)


def assert_kernel_answers(lab, srv, names: list[tuple[str, str]]) -> None:
    """Each (name, address) asked over UDP: the address answered, by the kernel (its answer
    counter rises by the queries asked), with the bytes userspace gives over TCP."""
    before = kernel_answered(lab, srv)
    for name, want in names:
        wire = lab.udp(srv.addr4, query(name))
        assert first_a(wire) == ("NOERROR", want), (name, wire)
        assert wire == lab.tcp(srv.addr4, query(name)), f"{name}: kernel and userspace bytes differ"
    after = kernel_answered(lab, srv)
    assert after - before >= len(names), (before, after, srv.stderr()[-3000:])


def wait_for(what: str, cond, timeout: float, step: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(step)
    raise AssertionError(f"{what}: not within {timeout} s")


def test_secondary_without_stored_copy_grows_the_maps(lab, tmp_path):
    zone = tmp_path / "grow.test.zone"
    big_zone(zone, "grow.test.", 1, RECORDS)
    knot = lab.start_knot_primary([("grow.test.", zone)], name="knot-grow")
    extra = f'\n[[zone]]\nname = "grow.test."\nprimaries = ["{knot.addr4}@53"]\n'
    # a zone at start: the program is loaded then (a zone set of nothing at all defers it:
    # test_secondary_with_nothing_at_start_loads_the_program_with_its_first_zone)
    small = tmp_path / "small.test.zone"
    big_zone(small, "small.test.", 1, 3)
    srv = lab.start_xdns([("small.test.", small)], name="xdns-grow-sec", wait=False, xdp="default", extra=extra)
    try:
        lab.wait_answering(srv.addr4, "grow.test.", srv.proc, timeout=60)
        wait_for("the grown maps", lambda: "kernel maps grown from" in srv.stderr(), 60)
        lab.wait_xdp_data(srv, timeout=60)
        err = srv.stderr()
        assert "could not grow" not in err and "sized at start" not in err, err[-3000:]
        z = [z for z in lab.xdns_stats(srv)["zones"] if z["name"] == "grow.test."][0]
        assert z["records"] == RECORDS + 3, z
        assert_kernel_answers(lab, srv, [(f"h{i}.grow.test.", address(i))
                                         for i in (0, 1, 12_345, 33_333, RECORDS - 1)])
        table = lab.xdns_stats(srv).get("xdp_table", {})
        print(f"\nsecondary of {RECORDS} records: "
              + next(l for l in err.splitlines() if "kernel maps grown from" in l).split("XDP: ")[-1]
              + f"; table {table}")
    finally:
        assert srv.alive(), srv.stderr()[-3000:]
        assert "panicked" not in srv.stderr()
        assert lab.stop(srv) == 0, srv.stderr()[-3000:]
        lab.stop(knot)


def test_deferred_load_still_refuses_a_missing_interface(lab, tmp_path):
    """The program's load is deferred for a secondary with nothing at start, but a
    configured interface that does not exist still fails the start, naming it."""
    from lab import XDNS_BIN
    a4, _ = lab.new_address()
    conf = tmp_path / "xdns.toml"
    conf.write_text(f'listen = ["{a4}:53"]\ncontrol = "{tmp_path}/control.sock"\n'
                    f'[xdp]\ninterfaces = ["xdnsnosuch9"]\n'
                    f'[[zone]]\nname = "first.test."\nprimaries = ["{a4}@5353"]\n')
    proc = lab.server([XDNS_BIN, "serve", "--config", str(conf)], name="xdns-nosuch-if")
    assert proc.wait(timeout=30) != 0
    err = (lab.dir / "xdns-nosuch-if.stderr").read_text()
    assert "xdnsnosuch9" in err and "no interface" in err, err[-2000:]
    assert "program load deferred" not in err, err[-2000:]


def test_secondary_with_nothing_at_start_loads_the_program_with_its_first_zone(lab, tmp_path):
    """Nothing for the kernel at start (a secondary without a stored copy, no zone file):
    no program is loaded or attached and userspace answers; the first transfer served loads
    it, sized for that zone (one verifier run, no growth), and the kernel answers the zone."""
    from lab import XDNS_BIN, run
    zone = tmp_path / "first.test.zone"
    big_zone(zone, "first.test.", 1, RECORDS)
    # the primary's address, on which nothing listens until the checks below are done
    paddr = lab.new_address()
    extra = f'\n[[zone]]\nname = "first.test."\nprimaries = ["{paddr[0]}@53"]\n'
    srv = lab.start_xdns([], name="xdns-first-sec", wait=False, xdp="default", extra=extra)
    knot = None
    try:
        wait_for("the start", lambda: "xdns started" in srv.stderr(), 30)
        wait_for("the first check's failure", lambda: "refresh failed" in srv.stderr(), 30)
        err = srv.stderr()
        assert "XDP: program load deferred until the first zone data" in err, err[-3000:]
        assert "XDP: program loaded (verifier)" not in err, err[-3000:]
        st = lab.xdns_stats(srv)
        assert st.get("xdp_data_active") is False, st
        assert not st.get("xdp_attached"), st
        # userspace answers (no zone yet: REFUSED), and no XDP counter exists to count it
        m = dns.message.from_wire(lab.udp(srv.addr4, query("h1.first.test.")))
        assert m.rcode() == dns.rcode.REFUSED, m
        assert not st.get("xdp"), st
        knot = lab.start_knot_primary([("first.test.", zone)], name="knot-first", addrs=paddr)
        p = run([XDNS_BIN, "zone", "--control", srv.extra["control"], "refresh", "first.test."])
        assert p.stdout.strip() == "ok refresh first.test.", p.stdout
        lab.wait_answering(srv.addr4, "first.test.", srv.proc, timeout=60)
        lab.wait_xdp_data(srv, timeout=60)
        err = srv.stderr()
        assert "XDP: program loaded with the first zone data and attached" in err, err[-3000:]
        assert err.count("XDP: program loaded (verifier)") == 1, err[-3000:]
        assert "kernel maps grown from" not in err and "could not grow" not in err, err[-3000:]
        assert lab.xdns_stats(srv).get("xdp_attached"), lab.xdns_stats(srv)
        assert_kernel_answers(lab, srv, [(f"h{i}.first.test.", address(i))
                                         for i in (0, 1, 23_456, RECORDS - 1)])
    finally:
        assert srv.alive(), srv.stderr()[-3000:]
        assert "panicked" not in srv.stderr()
        assert lab.stop(srv) == 0, srv.stderr()[-3000:]
        if knot is not None:
            lab.stop(knot)


def test_reload_that_outgrows_the_maps_loses_no_query(lab, tmp_path):
    zdir = tmp_path / "zones"
    zdir.mkdir()
    for f in ("example.com.zone", "example.com.inc"):
        shutil.copy(ZONES_DIR / f, zdir / f)
    zone = zdir / "example.com.zone"
    original = zone.read_text()
    srv = lab.start_xdns([("example.com.", zone)], name="xdns-grow-reload", xdp="default")
    assert_kernel_answers(lab, srv, [("www.example.com.", "198.18.0.10")] * 5)

    def ask(n: int):
        return first_a(lab.udp(srv.addr4, query("www.example.com.", n & 0xffff)))

    with AnswerWatcher(ask, old="198.18.0.10", new="198.18.0.210") as watch:
        time.sleep(0.5)
        changed = original.replace("2024060101", "2024060102").replace(
            "www\t300\tIN\tA\t198.18.0.10", "www\t300\tIN\tA\t198.18.0.210")
        assert changed.count("198.18.0.210") == 1, "zone layout changed: update this test"
        zone.write_text(changed + "".join(f"h{i}\tA\t{address(i)}\n" for i in range(RECORDS)))
        srv.proc.send_signal(signal.SIGHUP)
        wait_for("the grown maps", lambda: "kernel maps grown from" in srv.stderr(), 120)
        assert watch.wait_new(50, 10), f"new data never answered after the switch: {watch.counts}"
    err = srv.stderr()
    watch.assert_one_version_and_no_loss(min_new=51)
    assert "could not grow" not in err and "sized at start" not in err, err[-3000:]
    lab.wait_xdp_data(srv)
    assert_kernel_answers(lab, srv, [("www.example.com.", "198.18.0.210")]
                          + [(f"h{i}.example.com.", address(i)) for i in (0, 4_242, RECORDS - 1)])
    line = next(l for l in err.splitlines() if "kernel maps grown from" in l)
    print(f"\nreload to {RECORDS} records under load ({watch.counts['sent']} queries, none lost): "
          + line.split("XDP: ")[-1])
    assert "panicked" not in err
    assert lab.stop(srv) == 0, srv.stderr()[-3000:]


def test_maps_grow_after_privileges_are_dropped():
    """With `user = "nobody"` (and the resolver stage, the largest program) the XDP thread
    keeps what loading the program again needs (CAP_BPF, CAP_NET_ADMIN, CAP_PERFMON): a
    reload to 20,000 records grows the maps and the kernel answers them."""
    import os

    from test_privilege import start
    with Lab(prefix="xdl") as plab:
        os.chmod(plab.dir, 0o755)  # the daemon reads its configuration as nobody on reload
        zdir = plab.dir / "zones"
        zdir.mkdir()
        os.chmod(zdir, 0o755)
        for f in ("example.com.zone", "example.com.inc"):
            shutil.copy(ZONES_DIR / f, zdir / f)
            os.chmod(zdir / f, 0o644)
        zone = zdir / "example.com.zone"
        srv = start(plab, "xdns-grow-nobody", [("example.com.", zone)])
        try:
            zone.write_text(zone.read_text().replace("2024060101", "2024060109")
                            + "".join(f"h{i}\tA\t{address(i)}\n" for i in range(20_000)))
            srv.proc.send_signal(signal.SIGHUP)
            wait_for("the grown maps", lambda: "kernel maps grown from" in srv.stderr()
                     or "could not grow" in srv.stderr(), 60)
            err = srv.stderr()
            assert "kernel maps grown from" in err and "could not grow" not in err, err[-3000:]
            plab.wait_xdp_data(srv)
            assert_kernel_answers(plab, srv, [(f"h{i}.example.com.", address(i)) for i in (0, 19_999)])
        finally:
            assert "panicked" not in srv.stderr()
            assert plab.stop(srv) == 0, srv.stderr()[-3000:]
