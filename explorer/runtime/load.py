"""How many app requests are computing right now: so a timing can say it was taken under load.

Two visitors share two cores; a sweep timed while other requests compute is 1.4-2.4x slower, and a
number shown without saying so misleads. Every handler runs inside ``busy()``; the sweep reads
``window()`` around each measured length and reports how many *other* requests overlapped it.

``LOAD`` is the one process-wide instance: it holds two counters and a lock, never a user's data
(like the measurement lock in ``explorer.analysis.cost.sweep``).
"""

from __future__ import annotations

import contextlib
import threading


class Load:
    def __init__(self):
        self._lock = threading.Lock()
        self._active = 0
        self._started = 0
        self._mine = threading.local()  # per thread: is this thread inside busy()?

    @contextlib.contextmanager
    def busy(self):
        """Count the enclosed work as one running request (nested calls in a thread count once)."""
        depth = getattr(self._mine, "depth", 0)
        if depth == 0:
            with self._lock:
                self._active += 1
                self._started += 1
        self._mine.depth = depth + 1
        try:
            yield
        finally:
            self._mine.depth = depth
            if depth == 0:
                with self._lock:
                    self._active -= 1

    def snapshot(self) -> tuple:
        """``(running now, started so far)``."""
        with self._lock:
            return self._active, self._started

    @contextlib.contextmanager
    def window(self):
        """``with LOAD.window() as seen:`` -> ``seen["others"]``: requests other than the caller's that
        ran during the block (those already running at its start plus those started inside it)."""
        active0, started0 = self.snapshot()
        own = 1 if getattr(self._mine, "depth", 0) > 0 else 0
        seen = {"others": 0}
        try:
            yield seen
        finally:
            active1, started1 = self.snapshot()
            seen["others"] = max(0, active0 - own) + max(0, started1 - started0)


LOAD = Load()
