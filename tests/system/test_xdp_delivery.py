"""XDP answers are never lost silently (issue 23).

A veth delivers frames sent by native XDP_TX only to a peer that runs an XDP program of its
own; a container's veth, and the client veth of this lab unless a test attaches one, has none.
So:

- the configuration a user writes (`[xdp] interfaces`, no mode) on such a veth answers every
  query from the kernel, in generic mode, and `xdns stats`, the log and `xdns check` say why;
  a takeover keeps it so;
- an explicit `mode = "native"` there starts, warns once at attach naming the interface, the
  cause and both fixes (as `xdns check` does), and the loss shows in `xdp_tx_errors`;
- in `auto` mode, when the peer loses its program later and the driver's XDP_TX errors grow
  with the answers, the delivery guard moves the interface to generic mode by itself, logs it
  once and counts it (`xdp_fallbacks`, `/metrics`).

Runs in labs of its own (one XDP program per interface).
"""

from __future__ import annotations

import subprocess
import time

import dns.message
import pytest

from lab import DEFAULT_ZONES, XDNS_BIN, Lab


@pytest.fixture()
def dlab():
    with Lab(prefix="xdl") as lab:
        yield lab


@pytest.fixture()
def bare_lab():
    """GRO left off on both veths, as a new veth (a container's) has it: a native XDP_TX
    frame to a peer without XDP is then counted in the sender's `xdp_tx_errors`. (With GRO
    on, this kernel takes the frame into the peer's ring and loses it without a count.)"""
    with Lab(prefix="xdl", gro=False) as lab:
        yield lab


def ask(lab: Lab, addr: str, timeout: float = 1.0) -> dns.message.Message | None:
    q = dns.message.make_query("www.example.com.", "A", use_edns=True)
    wire = lab.udp(addr, q.to_wire(), timeout=timeout)
    return dns.message.from_wire(wire) if wire else None


def kernel_answered(lab: Lab, srv) -> int:
    return lab.xdns_stats(srv).get("xdp", {}).get("answered", 0)


def assert_kernel_answers(lab: Lab, srv, n: int = 5) -> None:
    before = kernel_answered(lab, srv)
    for _ in range(n):
        r = ask(lab, srv.addr4)
        assert r is not None, "no answer"
        assert [rr.to_text() for rr in r.answer] == ["www.example.com. 300 IN A 198.18.0.10"]
    assert kernel_answered(lab, srv) - before >= n, "the kernel did not answer"


def check(lab: Lab, srv) -> subprocess.CompletedProcess:
    """`xdns check` on the server's configuration, in the server's namespace."""
    return lab.server_run([XDNS_BIN, "check", "--config", srv.extra["conf"]], check=False)


def test_default_config_on_a_bare_veth_answers_from_the_kernel(dlab):
    dlab.client_xdp_remove()
    srv = dlab.start_xdns(DEFAULT_ZONES, name="xdns-bare", xdp="default")
    stats = dlab.xdns_stats(srv)
    iface = dlab.server_if
    assert stats["xdp_attached"] == {iface: "generic"}, stats.get("xdp_attached")
    reason = stats.get("xdp_mode_reason", {}).get(iface, "")
    assert f"veth peer {dlab.client_if}" in reason and reason.endswith("has no XDP program: generic"), reason
    assert stats.get("xdp_tx_errors", {}).get(iface) == 0, stats.get("xdp_tx_errors")
    assert "has no XDP program: generic" in srv.stderr(), srv.stderr()[-2000:]
    assert_kernel_answers(dlab, srv)
    c = check(dlab, srv)
    assert c.returncode == 0, c.stderr
    assert f"XDP: {iface}: mode auto: veth peer {dlab.client_if}" in c.stdout, c.stdout
    assert "warning" not in c.stderr, c.stderr

    # a takeover keeps the generic link (same mode) and its answers
    new = dlab.xdns_takeover(srv, "xdns-bare2")
    assert dlab.xdns_stats(new)["xdp_attached"] == {iface: "generic"}
    assert_kernel_answers(dlab, new)
    assert dlab.stop(new) == 0, new.stderr()[-2000:]


def test_native_on_a_bare_veth_warns_and_counts_the_loss(bare_lab):
    dlab = bare_lab
    dlab.client_xdp_remove()
    # not waiting for answers: once the data is in, the kernel's answers are lost
    srv = dlab.start_xdns(DEFAULT_ZONES, name="xdns-native", xdp="native", client_xdp=False, wait=False)
    dlab.wait_xdp_data(srv)
    iface = dlab.server_if
    log = srv.stderr()
    warnings = [ln for ln in log.splitlines() if 'mode = \\"native\\" will lose' in ln or 'mode = "native" will lose' in ln]
    assert len(warnings) == 1, log[-3000:]
    w = warnings[0]
    for part in (iface, f"veth peer {dlab.client_if}", "has no XDP program",
                 "attach an XDP", "program to the peer", "generic"):
        assert part in w, (part, w)
    c = check(dlab, srv)
    assert c.returncode == 0, c.stderr
    assert "warning: XDP:" in c.stderr and "will lose" in c.stderr and iface in c.stderr, c.stderr

    before = dlab.xdns_stats(srv)
    assert before["xdp_attached"] == {iface: "native"}
    for _ in range(3):
        assert ask(dlab, srv.addr4, timeout=0.5) is None, "native XDP_TX reached a bare veth"
    time.sleep(1.2)  # two looks of the delivery guard
    after = dlab.xdns_stats(srv)
    assert after["xdp"]["answered"] - before["xdp"]["answered"] >= 3
    assert after["xdp_tx_errors"][iface] - before["xdp_tx_errors"][iface] >= 3, after["xdp_tx_errors"]
    # explicit native stays native: the guard only says so, once
    assert after["xdp_attached"] == {iface: "native"}
    assert after.get("xdp_fallbacks", {}).get(iface) == 0
    assert srv.stderr().count("failed to send") == 1, srv.stderr()[-3000:]
    assert dlab.stop(srv) == 0, srv.stderr()[-2000:]


@pytest.mark.parametrize("gro", [False, True])
def test_auto_moves_to_generic_when_answers_are_lost(gro):
    """The peer loses its program while xdns runs: without GRO the driver counts the lost
    answers, with GRO nothing counts them and the guard's look at the peer finds it bare;
    either way the interface moves to generic within about a second."""
    with Lab(prefix="xdl", gro=gro) as dlab:
        guard_falls_back(dlab)


def guard_falls_back(dlab: Lab) -> None:
    srv = dlab.start_xdns(DEFAULT_ZONES, name="xdns-guard", xdp="auto", client_xdp=True)
    iface = dlab.server_if
    stats = dlab.xdns_stats(srv)
    assert stats["xdp_attached"] == {iface: "native"}, "a peer with a program: native"
    assert iface not in stats.get("xdp_mode_reason", {}), stats.get("xdp_mode_reason")
    assert_kernel_answers(dlab, srv)

    dlab.client_xdp_remove()  # the peer loses its program while xdns runs
    t0 = time.monotonic()
    lost = 0
    while (r := ask(dlab, srv.addr4, timeout=0.5)) is None:
        lost += 1
        assert time.monotonic() - t0 < 6, "the guard did not move the interface to generic"
    assert lost >= 1, "the first answers after the peer lost its program should be lost"
    stats = dlab.xdns_stats(srv)
    assert stats["xdp_attached"] == {iface: "generic"}
    assert stats["xdp_fallbacks"][iface] == 1
    reason = stats["xdp_mode_reason"][iface]
    assert "lost in native mode" in reason or reason.endswith("has no XDP program (any more): generic"), reason
    assert_kernel_answers(dlab, srv)
    assert srv.stderr().count("switched to generic mode") == 1, srv.stderr()[-3000:]
    m = dlab.xdns_metrics(srv)
    assert f'xdns_xdp_fallbacks_total{{interface="{iface}"}} 1' in m, m[-2000:]
    assert f'xdns_xdp_tx_errors_total{{interface="{iface}"}}' in m
    assert dlab.stop(srv) == 0, srv.stderr()[-2000:]


def test_edns_payload_change_on_reload_keeps_kernel_and_userspace_alike(dlab):
    """The kernel's EDNS payload is fixed when the program loads; a SIGHUP that changes
    `edns_payload` used to apply it in userspace only, so the same query got another OPT
    from the kernel (UDP) than from userspace (TCP). It is a restart setting now (with XDP
    on): the running value stays in both, and the log says a restart is needed."""
    import signal
    srv = dlab.start_xdns(DEFAULT_ZONES, name="xdns-edns", xdp="default",
                          extra="edns_payload = 1232\n")
    conf = srv.extra["conf"]
    conf.write_text(conf.read_text().replace("edns_payload = 1232", "edns_payload = 4000"))
    srv.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 10
    while dlab.xdns_stats(srv)["reloads"]["total"] < 1:
        assert time.monotonic() < deadline, "no reload"
        time.sleep(0.05)
    q = dns.message.make_query("www.example.com.", "A", use_edns=0, payload=4096)
    before = kernel_answered(dlab, srv)
    udp = dns.message.from_wire(dlab.udp(srv.addr4, q.to_wire()))
    assert kernel_answered(dlab, srv) == before + 1, "the kernel answers UDP"
    tcp = dns.message.from_wire(dlab.tcp(srv.addr4, q.to_wire()))
    assert udp.payload == tcp.payload == 1232, (udp.payload, tcp.payload)
    assert "edns_payload" in srv.stderr() and "restart needed" in srv.stderr(), srv.stderr()[-2000:]
    assert dlab.stop(srv) == 0
