"""Fair shares of the compute between visitors: who used how much lately, and whose waiting work runs next.

Two visitors' requests wait in one queue per slot group; served first come first served, four addresses
sending everything the caps allow keep a fifth waiting behind all of theirs. Here instead:

- ``Ledger``: the CPU seconds each visitor (a client address) used over the last ``window_s`` seconds,
  added by every request when it ends (its thread's CPU time, measured);
- ``pick``: which waiting event starts when a slot frees: per-address queues served in turn (the address
  with the fewest events running goes first, then the one that used least lately, then the oldest event),
  and beyond the group's ``limit`` slots up to ``guests`` more for an address with nothing running that is
  within its share and has at most ``LIGHT_EVENTS`` events in the queue: a visitor who asks little never
  waits for a slot held by those who ask a lot;
- ``over_share``: an address that used more than a part of its share lately, whose work runs at the lowest CPU
  priority (``explorer.app.server.calls``) so that the cores go to the others first.

Pure bookkeeping, no Gradio, no clock of its own (``now`` is passed in tests): the server's queue
(``explorer.app.server.gradio_compat.fair_queue``) asks ``pick``. ``LEDGER`` holds seconds per address,
never a user's data.
"""

from __future__ import annotations

import collections
import threading
import time

from explorer.runtime import settings

MAX_ADDRESSES = 4096  # addresses remembered; past it the quiet ones are forgotten


class Ledger:
    """CPU seconds per address over a sliding window (see the module docstring)."""

    def __init__(self, window_s=None):
        self._window = window_s
        self._lock = threading.Lock()
        self._spent: dict = {}  # address -> deque of (time, seconds)

    def window(self) -> float:
        return float(self._window() if callable(self._window) else self._window or settings.share_window())

    def _trim(self, times, now: float) -> None:
        cutoff = now - self.window()
        while times and times[0][0] <= cutoff:
            times.popleft()

    def add(self, address: str | None, seconds: float, now: float | None = None) -> None:
        if address is None or seconds <= 0:
            return
        now = time.monotonic() if now is None else now
        with self._lock:
            times = self._spent.setdefault(address, collections.deque())
            self._trim(times, now)
            times.append((now, float(seconds)))
            if len(self._spent) > MAX_ADDRESSES:
                for a in [a for a, t in self._spent.items() if not t or t[-1][0] <= now - self.window()]:
                    del self._spent[a]

    def used(self, address: str | None, now: float | None = None) -> float:
        if address is None:
            return 0.0
        now = time.monotonic() if now is None else now
        with self._lock:
            times = self._spent.get(address)
            if not times:
                return 0.0
            self._trim(times, now)
            return sum(s for _, s in times)

    def clear(self) -> None:
        with self._lock:
            self._spent.clear()


LEDGER = Ledger(settings.share_window)


LIGHT_EVENTS = 2  # an address with more events than this waiting or running is not a light visitor
HEAVY_PART = 16  # an address that used more than this part of its share lately yields: lowest priority, no guest slot


def over_share(address: str | None, used=None) -> bool:
    """Did ``address`` use more than ``1 / HEAVY_PART`` of its share lately (its work then yields the cores and
    takes no guest slot)?"""
    spent = LEDGER.used(address) if used is None else used
    return address is not None and spent > settings.visitor_share() / HEAVY_PART


def pick(waiting: list, running: dict, limit: int | None, guests: int, light) -> int | None:
    """The index in ``waiting`` (the addresses of a group's waiting events, oldest first) of the event to start
    now, or None: ``running`` counts the group's running events per address; ``limit`` (None: no limit) the
    group's slots, ``guests`` the extra slots for a light address with nothing running: ``light(address)``
    holds and it has at most ``LIGHT_EVENTS`` events waiting or running; lightness also orders the turns."""
    if not waiting:
        return None
    total = sum(running.values())
    if limit is not None and total >= limit + guests:
        return None
    held = dict(running)
    for address in waiting:
        held[address] = held.get(address, 0) + 1
    seen: dict = {}
    order = []
    for i, address in enumerate(waiting):
        if address in seen:
            continue  # an address's own events keep their order: only its oldest competes
        seen[address] = i
        heavy = held[address] > LIGHT_EVENTS or not light(address)
        order.append((running.get(address, 0), heavy, i))
    order.sort()
    if limit is None or total < limit:
        return order[0][2]
    for n, heavy, i in order:
        if n == 0 and not heavy:
            return i
    return None
