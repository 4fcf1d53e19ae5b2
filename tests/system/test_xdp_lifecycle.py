"""XDP attachment lifecycle of `xdns serve` (issue 3): the program hangs on a BPF link owned
by the process, so

- a running xdns answers UDP queries from the kernel (the `answered` XDP counter grows);
- a crashed xdns (SIGKILL) leaves no program behind that could answer stale data: the
  interface has no XDP program and queries go unanswered (nothing listens any more);
- a restart attaches again and answers from the kernel;
- SIGTERM detaches and exits 0;
- a fresh start attaches before it fills the kernel maps (userspace answers meanwhile) and
  says when the data is in (`xdp_data_active`); a takeover fills first, so the previous
  program answers until the new one has its data;
- `xdns stats` answers while the XDP thread fills or reloads the maps, and reports the
  generation that packets read at that moment;
- SIGTERM during that fill or reload stops at once: the write gives up at its next chunk;
  SIGTERM to a new process still loading for a takeover leaves the running server serving;
- `xdns stats` and the log say how each interface runs the program (what `mode = "auto"`
  chose), also after a takeover;
- answers much longer than their queries are still answered in the kernel over veth, where
  the frame has almost no tailroom: the program grows the head instead (xdns_resize).

Runs in a lab of its own: one XDP program per interface, and the shared session lab may carry
another XDP xdns.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import dns.message
import dns.rcode
import dns.rdatatype
import pytest

from lab import DEFAULT_ZONES, XDNS_BIN, Lab

GENZONE = Path(__file__).resolve().parents[2] / "bench" / "genzone.py"


@pytest.fixture(scope="module")
def xlab():
    with Lab(prefix="xdl") as lab:
        yield lab


def xdp_prog_id(lab: Lab) -> int | None:
    """The id of the XDP program on the server veth, or None."""
    out = subprocess.run(["ip", "-n", lab.server_ns, "-j", "-d", "link", "show", "dev",
                          lab.server_if], capture_output=True, text=True, check=True).stdout
    link = json.loads(out)[0]
    xdp = link.get("xdp") or {}
    prog = xdp.get("prog") or {}
    return prog.get("id") or xdp.get("prog_id") or None


def ask_a(lab: Lab, addr: str, name: str = "www.example.com.") -> dns.message.Message | None:
    q = dns.message.make_query(name, "A", use_edns=True)
    wire = lab.udp(addr, q.to_wire(), timeout=1.0)
    return dns.message.from_wire(wire) if wire else None


def kernel_answered(lab: Lab, srv) -> int:
    return dict(lab.xdns_stats(srv).get("xdp", {})).get("answered", 0)


def assert_answers_from_kernel(lab: Lab, srv) -> None:
    before = kernel_answered(lab, srv)
    for _ in range(5):
        r = ask_a(lab, srv.addr4)
        assert r is not None, "no answer"
        assert [rr.to_text() for rr in r.answer] == ["www.example.com. 300 IN A 198.18.0.10"]
    assert kernel_answered(lab, srv) - before >= 5, "the kernel did not answer"


def test_attach_crash_restart_term(xlab):
    assert xdp_prog_id(xlab) is None, "a fresh veth has no XDP program"

    srv = xlab.start_xdns(DEFAULT_ZONES, name="xdns-life1", xdp="native")
    first = xdp_prog_id(xlab)
    assert first is not None, "xdns attached nothing"
    assert_answers_from_kernel(xlab, srv)

    # Crash: the link dies with the process; no stale program keeps answering.
    srv.proc.send_signal(signal.SIGKILL)
    srv.proc.wait(timeout=10)
    assert xdp_prog_id(xlab) is None, "a killed xdns left its XDP program attached"
    assert ask_a(xlab, srv.addr4) is None, "something still answers for the killed server"

    # Restart: attached again, answering from the kernel.
    srv2 = xlab.start_xdns(DEFAULT_ZONES, name="xdns-life2", xdp="native")
    assert xdp_prog_id(xlab) is not None
    assert_answers_from_kernel(xlab, srv2)

    # SIGTERM: clean exit, program detached.
    assert xlab.stop(srv2, signal.SIGTERM) == 0, srv2.stderr()[-2000:]
    assert xdp_prog_id(xlab) is None, "SIGTERM left the XDP program attached"
    assert "panicked" not in srv2.stderr()


def test_fresh_start_fills_after_attaching_takeover_before(xlab):
    srv = xlab.start_xdns(DEFAULT_ZONES, name="xdns-fill1", xdp="native")  # waits for the data
    assert xlab.xdns_stats(srv)["xdp_data_active"] is True
    log = srv.stderr()
    attached, filled = log.find("XDP: attached"), log.find("XDP: kernel maps filled")
    assert 0 <= attached < filled, f"a fresh start should attach, then fill:\n{log[-3000:]}"
    assert_answers_from_kernel(xlab, srv)

    new = xlab.xdns_takeover(srv, "xdns-fill2")
    log = new.stderr()
    filled, swapped = log.find("XDP: kernel maps filled"), log.find("XDP: program replaced inside")
    assert 0 <= filled < swapped, f"a takeover should fill, then swap the program in:\n{log[-3000:]}"
    assert xlab.xdns_stats(new)["xdp_data_active"] is True
    assert xlab.xdns_stats(new)["xdp_attached"] == {xlab.server_if: "native"}, "the new program runs"
    assert_answers_from_kernel(xlab, new)
    assert xlab.stop(new) == 0, new.stderr()[-2000:]


def wait_log(srv, text: str, count: int = 1, timeout: float = 90.0) -> None:
    """Wait until `text` appears `count` times in srv's log."""
    deadline = time.monotonic() + timeout
    while srv.stderr().count(text) < count:
        assert srv.alive(), srv.stderr()[-3000:]
        assert time.monotonic() < deadline, f"no {count}x {text!r} in:\n{srv.stderr()[-3000:]}"
        time.sleep(0.02)


def test_stats_answer_while_the_maps_fill_and_reload(xlab):
    """Counters are read from the kernel maps, not asked of the XDP thread, which spends
    seconds filling the maps of a large zone set. So `xdns stats` answers during a fresh
    start's fill (no data active yet: userspace answers) and during a reload (the old data is
    still active), instead of waiting for either to end."""
    srv = xlab.start_xdns(big_zones(xlab), name="xdns-fillstats", xdp="native", wait=False)
    filled = "XDP: kernel maps filled"

    wait_log(srv, "XDP: attached")
    assert filled not in srv.stderr(), "the fill ended before stats could be asked: use a larger zone"
    early = xlab.xdns_stats(srv)
    assert filled not in srv.stderr(), "stats answered only once the fill had ended"
    assert early["xdp_data_active"] is False, early
    assert "answered" in dict(early["xdp"]), early
    xlab.wait_xdp_data(srv, timeout=90)

    srv.proc.send_signal(signal.SIGHUP)
    wait_log(srv, "XDP: compiling answers", count=2)
    assert srv.stderr().count(filled) == 1, "the reload ended before stats could be asked"
    during = xlab.xdns_stats(srv)
    assert srv.stderr().count(filled) == 1, "stats answered only once the reload had ended"
    assert during["xdp_data_active"] is True, "the old data answers until the new is complete"
    wait_log(srv, filled, count=2)
    assert_answers_from_kernel(xlab, srv)
    assert xlab.stop(srv) == 0, srv.stderr()[-2000:]


def big_zones(xlab) -> list:
    """The test zones and a generated one of 300k records (its XDP fill takes over a second)."""
    big = xlab.dir / "fill.bench.test.zone"
    if not big.exists():
        with open(big, "w") as f:
            subprocess.run([sys.executable, GENZONE, "--records", "300000", "--origin", "bench.test."],
                           stdout=f, check=True)
    return DEFAULT_ZONES + [("bench.test.", big)]


def test_sigterm_abandons_a_fill_or_reload_under_way(xlab):
    """Stopping need not wait for the kernel maps to fill: the data would go with them. SIGTERM
    during a fresh start's fill, and during a reload, exits cleanly with the write abandoned."""
    filled = "XDP: kernel maps filled"
    srv = xlab.start_xdns(big_zones(xlab), name="xdns-abandon1", xdp="native", wait=False)
    wait_log(srv, "XDP: attached")
    assert filled not in srv.stderr(), "the fill ended before SIGTERM could be sent: use a larger zone"
    assert xlab.stop(srv, signal.SIGTERM) == 0, srv.stderr()[-2000:]
    log = srv.stderr()
    assert "XDP: filling the maps abandoned: stopping" in log and filled not in log, log[-3000:]

    srv = xlab.start_xdns(big_zones(xlab), name="xdns-abandon2", xdp="native", timeout=90)
    srv.proc.send_signal(signal.SIGHUP)
    wait_log(srv, "XDP: compiling answers", count=2)
    assert srv.stderr().count(filled) == 1, "the reload ended before SIGTERM could be sent"
    assert xlab.stop(srv, signal.SIGTERM) == 0, srv.stderr()[-2000:]
    log = srv.stderr()
    assert "SIGTERM during a reload: stopping" in log, log[-3000:]
    assert "XDP: reload abandoned: stopping" in log and log.count(filled) == 1, log[-3000:]
    assert "panicked" not in log and "ERROR" not in log, log[-3000:]


def test_sigterm_during_a_takeovers_start_keeps_the_running_server(xlab):
    """A stop request to a new process while it loads (here: filling its kernel maps, which a
    takeover does before it asks for the sockets) ends it before it takes anything over, and
    the running server keeps serving. (Before, the new process took over, then stopped:
    nobody served.)"""
    srv = xlab.start_xdns(big_zones(xlab), name="xdns-tkstop1", xdp="native", timeout=90)
    new = xlab.xdns_takeover(srv, "xdns-tkstop2", wait=False)
    wait_log(new, "XDP: program loaded (verifier)")
    assert "kernel maps filled" not in new.stderr(), "the fill ended before SIGTERM could be sent"
    assert xlab.stop(new, signal.SIGTERM, timeout=60) == 0, new.stderr()[-2000:]
    log = new.stderr()
    assert "SIGTERM during start-up: stopping" in log, log[-3000:]
    assert "takeover: received" not in log, log[-3000:]
    assert srv.alive(), "the running server stopped:\n" + srv.stderr()[-2000:]
    assert_answers_from_kernel(xlab, srv)
    assert xlab.stop(srv) == 0, srv.stderr()[-2000:]


def test_stats_say_how_the_interface_runs_the_program(xlab):
    """With `mode = "auto"` the kernel chooses between the driver (native) and the much slower
    skb path (generic); `xdns stats` and the attach log say which it chose, asked of the
    kernel. veth has native XDP; `generic` is reported as such; loopback has none, so `auto`
    runs generic there, and the log warns."""
    for mode, want in [("auto", "native"), ("generic", "generic")]:
        # a client program, so that `auto` may choose native (test_xdp_delivery: without)
        srv = xlab.start_xdns(DEFAULT_ZONES, name=f"xdns-mode-{mode}", xdp=mode, client_xdp=True)
        stats = xlab.xdns_stats(srv)
        assert stats["xdp_attached"] == {xlab.server_if: want}, stats.get("xdp_attached")
        line = next(ln for ln in srv.stderr().splitlines() if "XDP: attached" in ln)
        assert f"running={want}" in line.replace('"', ""), line
        if want == "native":
            assert_answers_from_kernel(xlab, srv)
        table = subprocess.run([str(XDNS_BIN), "stats", "--control", str(srv.extra["control"])],
                               capture_output=True, text=True, timeout=10).stdout
        assert any(r.split() == [f"xdp_attached.{xlab.server_if}", want] for r in table.splitlines()), table
        assert xlab.stop(srv) == 0, srv.stderr()[-2000:]
    # loopback has no native XDP: `auto` falls back to generic, with a warning
    srv = xlab.start_xdns(DEFAULT_ZONES, name="xdns-mode-lo",
                          extra='\n[xdp]\ninterfaces = ["lo"]\nmode = "auto"\n')
    xlab.wait_xdp_data(srv)
    assert xlab.xdns_stats(srv)["xdp_attached"] == {"lo": "generic"}
    assert "the driver has no native XDP" in srv.stderr(), srv.stderr()[-2000:]
    assert xlab.stop(srv) == 0, srv.stderr()[-2000:]


def test_long_answers_grow_the_head_over_veth(xlab):
    """Queries sent from a socket reach the server veth as skb data with only allocation slack
    behind it; answers up to ~190 bytes longer than the query must still come from the kernel.
    Names of every length from 1 to 63 extra bytes cover every alignment of that slack."""
    srv = xlab.start_xdns(DEFAULT_ZONES, name="xdns-grow", xdp="native")
    cases = []
    for n in range(1, 64):
        cases.append((f"{'n' * n}.example.com.", "A", True, dns.rcode.NXDOMAIN))   # + SOA
        cases.append((f"{'w' * n}.wild.example.com.", "TXT", False, dns.rcode.NOERROR))
    cases += [("example.com.", "MX", True, dns.rcode.NOERROR),
              ("txt.example.com.", "TXT", True, dns.rcode.NOERROR),
              ("www.example.com.", "HTTPS", False, dns.rcode.NOERROR)]
    before = kernel_answered(xlab, srv)
    for name, rtype, edns, rcode in cases:
        q = dns.message.make_query(name, rtype, use_edns=edns)
        wire = xlab.udp(srv.addr4, q.to_wire(), timeout=1.0)
        assert wire is not None, f"{name} {rtype}: no answer"
        r = dns.message.from_wire(wire)
        assert r.rcode() == rcode, f"{name} {rtype}: {dns.rcode.to_text(r.rcode())}"
        assert len(wire) - len(q.to_wire()) > 16, "the answer should be longer than the query"
    assert kernel_answered(xlab, srv) - before == len(cases), xlab.xdns_stats(srv)["xdp"]
    assert xlab.stop(srv) == 0


def test_repeated_question_is_answered_through_the_memo(xlab):
    """A question asked again byte for byte is answered through the per-CPU question memo
    (bpf/memo.h): kept at its second ask on a CPU, used from the third. Ten asks over two CPUs
    put at least five on one of them: at least three memo hits, each a correct answer, and
    `xdns stats` shows them (`xdp_memo`)."""
    srv = xlab.start_xdns(DEFAULT_ZONES, name="xdns-memo", xdp="native")
    before = xlab.xdns_stats(srv)["xdp_memo"]  # the lab's readiness queries may be kept
    for _ in range(10):
        r = ask_a(xlab, srv.addr4)
        assert r is not None and r.rcode() == dns.rcode.NOERROR and r.answer, r
    after = xlab.xdns_stats(srv)["xdp_memo"]
    delta = {k: after[k] - before.get(k, 0) for k in after}
    assert delta["hits"] >= 3, (before, after)
    assert 1 <= delta["kept"] <= 2, (before, after)
    assert xlab.stop(srv) == 0
