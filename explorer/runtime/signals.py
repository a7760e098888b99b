"""A stop signal that crosses a process boundary: what a GPU call polls instead of the caller's callable.

On a ZeroGPU Space every ``@gpu`` call's arguments are pickled and the function runs in a worker
process forked from the server, so a caller's ``should_stop`` (a closure over a ``threading.Event``)
can neither be sent nor, if it could, see the caller's later changes. ``stop_channel(should_stop)``
gives the GPU call a ``StopToken`` instead: a slot index into one anonymous shared memory page
(``mmap(-1, ...)``, ``MAP_SHARED``), made when this module is imported, so before the server forks
any worker, and therefore the same physical page in the server and in every worker. Pickled, a token
is just its slot number; calling it reads its byte. While the call runs, a thread on the caller's
side polls ``should_stop`` and sets the byte, which the worker sees at its next check (a ``Guard``
between two modules). No file, no server process, nothing to clean up; the same token works in the
calling process when no worker is involved. Without ``fork`` (Windows) the page is per process, which
is all a process without workers needs.

The same slot carries progress the other way: ``token.report(fraction)`` in the worker writes one byte
of a second shared page, and ``stop_channel(..., progress=fn)``'s watcher calls ``fn(fraction)`` on the
caller's side when it changes (a progress bar per layer of a GPU call that is one forward pass).
"""

from __future__ import annotations

import contextlib
import mmap
import threading

SLOTS = 4096  # stops in flight at once: one per running GPU call that can be stopped
_FLAGS = mmap.mmap(-1, SLOTS)
_PROGRESS = mmap.mmap(
    -1, SLOTS
)  # per slot: 0 nothing reported, else 1 + fraction * 240 (exact for 1/2 .. 1/16 of the layers)
_FREE = list(range(SLOTS - 1, -1, -1))
_LOCK = threading.Lock()


class StopToken:
    """Picklable and callable: ``token()`` is True once the caller asked to stop."""

    __slots__ = ("slot",)

    def __init__(self, slot: int):
        self.slot = int(slot)

    def __call__(self) -> bool:
        return self.slot >= 0 and _FLAGS[self.slot] != 0

    def set(self) -> None:
        if self.slot >= 0:
            _FLAGS[self.slot] = 1

    def report(self, fraction: float) -> None:
        """Tell the caller (``stop_channel``'s ``progress``) that ``fraction`` of the work is done."""
        if self.slot >= 0:
            _PROGRESS[self.slot] = 1 + int(round(min(1.0, max(0.0, float(fraction))) * 240))

    def reported(self) -> float | None:
        """The last fraction ``report`` wrote; None before any."""
        byte = _PROGRESS[self.slot] if self.slot >= 0 else 0
        return None if byte == 0 else (byte - 1) / 240

    def __reduce__(self):
        return StopToken, (self.slot,)

    def __eq__(self, other) -> bool:
        return isinstance(other, StopToken) and other.slot == self.slot

    def __hash__(self) -> int:
        return hash(("StopToken", self.slot))

    def __repr__(self) -> str:
        return f"StopToken({self.slot})"


NEVER = StopToken(-1)  # the token of work nobody can stop


def _never() -> bool:
    return False


def _take() -> int:
    with _LOCK:
        if not _FREE:
            raise RuntimeError(f"more than {SLOTS} stoppable GPU calls at once")
        slot = _FREE.pop()
    _FLAGS[slot] = 0
    _PROGRESS[slot] = 0
    return slot


def _give(slot: int) -> None:
    _FLAGS[slot] = 0
    with _LOCK:
        _FREE.append(slot)


@contextlib.contextmanager
def stop_channel(should_stop=None, poll_s: float = 0.05, progress=None):
    """A ``StopToken`` set within ``poll_s`` of ``should_stop()`` turning True, for the enclosed calls
    (``NEVER`` when both ``should_stop`` and ``progress`` are None). The token is set at once when the caller
    already stopped. ``progress(fraction)``: called here within ``poll_s`` of each new ``token.report``."""
    if should_stop is None and progress is not None:
        should_stop = _never
    if should_stop is None:
        yield NEVER
        return
    token = StopToken(_take())
    done = threading.Event()

    def watch():
        seen = None
        while True:
            now = token.reported()
            if progress is not None and now is not None and now != seen:
                seen = now
                progress(now)
            if should_stop():
                token.set()
                return
            if done.wait(poll_s):
                now = token.reported()  # the last report of a call shorter than one poll
                if progress is not None and now is not None and now != seen:
                    progress(now)
                return

    if should_stop():
        token.set()
    watcher = threading.Thread(target=watch, name="stop-channel", daemon=True)
    watcher.start()
    try:
        yield token
    finally:
        done.set()
        watcher.join()
        _give(token.slot)
