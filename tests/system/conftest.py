"""Fixtures: one lab per test session, with Knot DNS, NSD and xdns serving the test zones.

`xdns` is parametrized: "userspace" (no XDP) and "xdp" (xdns's XDP program attached in native
mode to the server veth, so UDP queries it can answer never reach the daemon). Every test that
uses it runs against both.
"""

import pytest

from lab import DEFAULT_ZONES, Lab


@pytest.fixture(scope="session")
def lab():
    with Lab() as lab:
        yield lab


@pytest.fixture(scope="session")
def knot(lab):
    return lab.start_knot(DEFAULT_ZONES)


@pytest.fixture(scope="session")
def nsd(lab):
    return lab.start_nsd(DEFAULT_ZONES)


@pytest.fixture(scope="session", params=["userspace", "xdp"])
def xdns(lab, request):
    xdp = "native" if request.param == "xdp" else None
    srv = lab.start_xdns(DEFAULT_ZONES, name=f"xdns-{request.param}", xdp=xdp)
    attached = "prog/xdp" in lab.server_run(["ip", "link", "show", "dev", lab.server_if]).stdout
    assert attached == (xdp is not None), f"XDP attached: {attached}, wanted {xdp}"
    yield srv
    # Whatever ran against it, the shared server must not have crashed or panicked.
    assert srv.alive(), f"xdns exited with {srv.proc.returncode}:\n{srv.stderr()[-3000:]}"
    assert "panicked" not in srv.stderr(), srv.stderr()[-3000:]
    # A clean stop (exit 0) detaches the program: the next variant starts from a bare veth.
    assert lab.stop(srv) == 0, srv.stderr()[-3000:]
    link = lab.server_run(["ip", "link", "show", "dev", lab.server_if]).stdout
    assert "prog/xdp" not in link, f"XDP program left attached after SIGTERM:\n{link}"
