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
"""
from __future__ import annotations

import contextlib
import mmap
import threading

SLOTS = 4096  # stops in flight at once: one per running GPU call that can be stopped
_FLAGS = mmap.mmap(-1, SLOTS)
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

    def __reduce__(self):
        return StopToken, (self.slot,)

    def __eq__(self, other) -> bool:
        return isinstance(other, StopToken) and other.slot == self.slot

    def __hash__(self) -> int:
        return hash(("StopToken", self.slot))

    def __repr__(self) -> str:
        return f"StopToken({self.slot})"


NEVER = StopToken(-1)  # the token of work nobody can stop


def _take() -> int:
    with _LOCK:
        if not _FREE:
            raise RuntimeError(f"more than {SLOTS} stoppable GPU calls at once")
        slot = _FREE.pop()
    _FLAGS[slot] = 0
    return slot


def _give(slot: int) -> None:
    _FLAGS[slot] = 0
    with _LOCK:
        _FREE.append(slot)


@contextlib.contextmanager
def stop_channel(should_stop=None, poll_s: float = 0.05):
    """A ``StopToken`` set within ``poll_s`` of ``should_stop()`` turning True, for the enclosed calls
    (``NEVER`` when ``should_stop`` is None). The token is set at once when the caller already stopped."""
    if should_stop is None:
        yield NEVER
        return
    token = StopToken(_take())
    done = threading.Event()

    def watch():
        while True:
            if should_stop():
                token.set()
                return
            if done.wait(poll_s):
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
