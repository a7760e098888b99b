"""Heavy work beside light work: admitted per family, run at low priority, stopped when nobody wants it.

Interactive requests (maps, statistics, gradients) share Gradio's "compute" slots. Heavy work comes in
families, each with its own number of slots (``LIMITS``): training presses, reproductions, exports,
latency sweeps and long-context views. A heavy event is wired with ``concurrency_limit=None`` so it never waits in
Gradio's queue (which every event shares: a flood of presses there would lock everyone out); instead it asks
``HEAVY`` for a slot of its family here, where

- one visitor has at most one heavy job at a time, whatever its family: a visitor is a client address
  (``explorer.app.server.visitors``: sessions are free to make, addresses are not), or the Gradio session when the
  request names no address; Stop, Pause and Reset reach the session's own job only;
- a family's slots full, a job waits up to its family's ``WAIT_S`` (at most as many waiting as there
  are slots), else is answered at once with ``Busy``, a message, never a queue;
- the work runs in a fresh worker thread at the lowest CPU priority (``nice`` 19), so the two cores go
  to interactive requests first and heavy work takes what is left;
- ``should_stop()`` turns True when the visitor stops the job (``HEAVY.stop``: Pause, Stop, Reset), the
  event is cancelled, the client disconnects or never opened the result stream
  (``explorer.app.server.streams.gone_probe``) or nobody has read the job's output for ``STALE_S``; the work checks it
  inside its long steps (``explorer.runtime.stopping``), and the job's slot is freed only once its thread has ended.

``run_job`` awaits one result; ``stream_job`` is an async generator of what the work ``emit``-s.

``HEAVY`` holds counters, the visitor of each running job and its stop flag; never a user's data
(like ``explorer.runtime.load.LOAD``).
"""

from __future__ import annotations

import asyncio
import contextvars
import os
import queue
import threading
import time
from dataclasses import dataclass, field

from explorer.app.server import visitors
from explorer.app.server.streams import gone_probe
from explorer.runtime.load import LOAD
from explorer.runtime.pool import Busy

LIMITS = {"train": 2, "reproduce": 1, "export": 1, "sweep": 1, "long_context": 1}
WAIT_S = {"train": 0.0, "reproduce": 0.0, "export": 20.0, "sweep": 30.0, "long_context": 20.0}
NAMES = {
    "train": "training run",
    "reproduce": "reproduction",
    "export": "export",
    "sweep": "latency sweep",
    "long_context": "long-context view",
}
_END = object()  # the end of a job's items
STALE_S = 30.0  # a job whose output nobody has read for this long is abandoned
POLL_S = 0.05  # how often a waiting handler looks at its worker


@dataclass
class Ticket:
    """One admitted job: its family, its visitor's session and client address (both None: a direct call,
    no per-visitor rule) and its stop flag."""

    family: str
    visitor: str | None
    client: str | None = None
    stop: threading.Event = field(default_factory=threading.Event)


class Admission:
    """Slots per family and one heavy job per visitor (see the module docstring)."""

    def __init__(self, limits: dict, wait_s: dict | None = None):
        self.limits = dict(limits)
        self.wait_s = dict(wait_s or {})
        self._lock = threading.Lock()
        self._running: list = []
        self._waiting = {f: 0 for f in self.limits}

    def running(self, family: str | None = None) -> int:
        with self._lock:
            return sum(1 for t in self._running if family in (None, t.family))

    def _try(self, family: str, visitor, client) -> Ticket | None:
        with self._lock:
            mine = next(
                (
                    t
                    for t in self._running
                    if (client is not None and t.client == client)
                    or (client is None and visitor is not None and t.visitor == visitor)
                ),
                None,
            )
            if mine is not None:
                what = NAMES.get(mine.family, mine.family)
                whose = "your" if mine.visitor == visitor else "a"
                where = "" if mine.visitor == visitor else " from your address (another tab or client)"
                raise Busy(
                    f"One heavy job at a time per visitor: {whose} {what}{where} is still running; stop it "
                    "(or wait for it to end) first."
                )
            if sum(t.family == family for t in self._running) < self.limits[family]:
                ticket = Ticket(family, visitor, client)
                self._running.append(ticket)
                return ticket
        return None

    async def admit(self, family: str, visitor: str | None, client: str | None = None) -> Ticket:
        """A slot of ``family`` for ``visitor`` (a session) at ``client`` (its address), waiting up to the
        family's ``wait_s``; else ``Busy``."""
        if family not in self.limits:
            raise ValueError(f"unknown job family {family!r}; valid: {sorted(self.limits)}")
        ticket = self._try(family, visitor, client)
        if ticket is not None:
            return ticket
        deadline = time.monotonic() + self.wait_s.get(family, 0.0)
        with self._lock:
            full = self._waiting[family] >= self.limits[family] or time.monotonic() >= deadline
            if not full:
                self._waiting[family] += 1
        try:
            while not full and time.monotonic() < deadline:
                await asyncio.sleep(0.2)
                ticket = self._try(family, visitor, client)
                if ticket is not None:
                    return ticket
        finally:
            if not full:
                with self._lock:
                    self._waiting[family] -= 1
        n = self.limits[family]
        raise Busy(
            f"The server is busy: its {n} {NAMES.get(family, family)} slot{'s' * (n > 1)} "
            f"{'are' if n > 1 else 'is'} in use by other visitors right now; try again in a minute."
        )

    def release(self, ticket: Ticket) -> None:
        with self._lock:
            if ticket in self._running:
                self._running.remove(ticket)

    def stop(self, visitor: str | None, families=None) -> bool:
        """Ask ``visitor``'s running job (of one of ``families``, default any) to stop; True if there was one."""
        if visitor is None:
            return False
        with self._lock:
            found = [t for t in self._running if t.visitor == visitor and (families is None or t.family in families)]
        for t in found:
            t.stop.set()
        return bool(found)


HEAVY = Admission(LIMITS, WAIT_S)


def visitor_of(request) -> str | None:
    """The session a request comes from: its Gradio session (None for a direct call, as in tests)."""
    return getattr(request, "session_hash", None) or None


def client_of(request) -> str | None:
    """The client address a request comes from (None for a direct call or a request without one)."""
    return visitors.of_request(request)


def low_priority() -> None:
    """Lower the calling thread's CPU priority to ``nice`` 19 (Linux: a thread id is a process id for
    ``setpriority``). Only for a thread made for one job: a thread cannot raise its priority again."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    except (AttributeError, OSError):
        pass


class _Worker:
    """``work(should_stop, emit)`` in a fresh thread (Gradio's context copied: progress bars work)."""

    def __init__(self, work, stop: threading.Event, low: bool, on_end=None):
        self.items: queue.Queue = queue.Queue()
        self.result = self.error = None
        self.read = time.monotonic()
        gone = gone_probe()

        def should_stop() -> bool:
            return stop.is_set() or gone() or time.monotonic() - self.read > STALE_S

        def run():
            if low:
                low_priority()
            try:
                with LOAD.busy():
                    self.result = work(should_stop, self.items.put)
            except BaseException as exc:  # handed to the waiting handler, which raises it there
                self.error = exc
            finally:
                if on_end is not None:
                    on_end()

        self.thread = threading.Thread(
            target=contextvars.copy_context().run, args=(run,), daemon=True, name="explorer-job"
        )
        self.thread.start()

    async def ended(self) -> None:
        while self.thread.is_alive():
            self.read = time.monotonic()
            await asyncio.sleep(POLL_S)

    def outcome(self):
        if self.error is not None:
            raise self.error
        return self.result


async def _guarded(worker: _Worker, stop: threading.Event, wait):
    """Await ``wait`` (a coroutine on ``worker``); a cancelled event stops the work and waits for its end."""
    try:
        return await wait
    except (asyncio.CancelledError, GeneratorExit):
        stop.set()
        await asyncio.shield(worker.ended())
        raise


async def run_job(family: str, request, work):
    """Admit a ``family`` job for the request's visitor, run ``work(should_stop)`` at low priority in a
    worker thread and return its result (its exception re-raised); ``Busy`` when not admitted."""
    ticket = await HEAVY.admit(family, visitor_of(request), client_of(request))
    worker = _Worker(
        lambda should_stop, _emit: work(should_stop), ticket.stop, True, on_end=lambda: HEAVY.release(ticket)
    )
    await _guarded(worker, ticket.stop, worker.ended())
    return worker.outcome()


async def stream_job(family: str, request, work, first=_END):
    """Async generator: admit a ``family`` job, yield ``first`` (when given: the page's first answer,
    once the job is admitted, so a stop sent right after it reaches the job), run ``work(should_stop,
    emit)`` at low priority in a worker thread and yield every item it ``emit``-s as it comes; the
    work's exception is raised after the items it emitted. ``Busy`` (before anything is yielded) when
    not admitted."""
    ticket = await HEAVY.admit(family, visitor_of(request), client_of(request))
    if first is not _END:
        try:
            yield first
        except BaseException:
            HEAVY.release(ticket)
            raise
    worker = _Worker(work, ticket.stop, True, on_end=lambda: HEAVY.release(ticket))

    async def next_item():
        while True:
            worker.read = time.monotonic()
            try:
                return worker.items.get_nowait()
            except queue.Empty:
                if not worker.thread.is_alive() and worker.items.empty():
                    return _END
            await asyncio.sleep(POLL_S)

    try:
        while True:
            item = await _guarded(worker, ticket.stop, next_item())
            if item is _END:
                break
            yield item
    finally:
        if worker.thread.is_alive():  # the consumer went away between two items (aclose)
            ticket.stop.set()
            await asyncio.shield(worker.ended())
    worker.outcome()
