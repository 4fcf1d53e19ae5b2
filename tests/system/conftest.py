"""Fixtures: one lab per test session, with Knot DNS, NSD and xdns serving the test zones."""

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


@pytest.fixture(scope="session")
def xdns(lab):
    srv = lab.start_xdns(DEFAULT_ZONES)
    yield srv
    # Whatever ran against it, the shared server must not have crashed or panicked.
    assert srv.alive(), f"xdns exited with {srv.proc.returncode}:\n{srv.stderr()[-3000:]}"
    assert "panicked" not in srv.stderr(), srv.stderr()[-3000:]
