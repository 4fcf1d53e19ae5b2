"""A client that asks one question again and again while a test changes the server under it.

`AnswerWatcher` runs on its own thread and sorts every answer as the old data, the new data,
or something else; the reload tests use it to show that a reload under load loses no query
and never answers anything but one version or the other.
"""

from __future__ import annotations

import threading
import time
from typing import Callable


class AnswerWatcher:
    """`ask(n)` sends the n-th query and returns `(rcode, first A address)`, `(None, None)`
    when nothing came back. Use as a context manager: the thread runs inside the block."""

    def __init__(self, ask: Callable[[int], tuple[str | None, str | None]], old: str, new: str):
        self.ask, self.old, self.new = ask, old, new
        self.counts = {"sent": 0, "answered": 0, "old": 0, "new": 0, "other": []}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        c = self.counts
        while not self._stop.is_set():
            c["sent"] += 1
            rcode, a = self.ask(c["sent"])
            if rcode is not None:
                c["answered"] += 1
            if a == self.old:
                c["old"] += 1
            elif a == self.new:
                c["new"] += 1
            else:
                c["other"].append((rcode, a))

    def __enter__(self) -> "AnswerWatcher":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def wait_new(self, more: int, timeout: float) -> bool:
        """Wait until `more` answers with the new data came after this call."""
        want = self.counts["new"] + more
        deadline = time.monotonic() + timeout
        while self.counts["new"] < want and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.counts["new"] >= want

    def assert_one_version_and_no_loss(self, min_new: int = 50) -> None:
        c = self.counts
        assert c["sent"] == c["answered"], f"lost answers during the reload: {c}"
        assert not c["other"], c["other"][:10]
        assert c["old"] > 0 and c["new"] >= min_new, c
