"""Shared pytest setup for the xdns system tests.

- puts tests/lab and tests/system on sys.path;
- turns every skip (and every xfail) into a failure: a test that does not run proves nothing,
  and `make test` must fail rather than report a green run with holes in it.
"""

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
for sub in ("lab", "system"):
    p = str(HERE / sub)
    if p not in sys.path:
        sys.path.insert(0, p)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.skipped:
        reason = getattr(rep, "wasxfail", None) or rep.longrepr
        rep.outcome = "failed"
        rep.longrepr = f"skipped/xfailed tests are not allowed here: {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    rep = outcome.get_result()
    if rep.outcome == "skipped":
        rep.outcome = "failed"
        rep.longrepr = f"module-level skip is not allowed: {rep.longrepr}"
