"""One memory pool for the whole server: every job that allocates reserves its predicted bytes first.

The per-request budget (``explorer.runtime.budget``) bounds one request; the pool bounds all of them
together. It holds ``settings.server_memory`` bytes: by default four fifths of what this process may
still allocate when the pool is first used (the machine's available memory, its cgroup's limit, or
its address-space limit, whichever leaves least: ``available_bytes``). An analysis, a sweep point, a
training run, a reproduction or an export reserves the bytes ``models.footprint`` predicts for it
before it allocates anything and gives them back when it is done. A reservation that does not fit
waits for others to finish, up to its ``wait_s``, then is refused with ``Busy`` (a ``ConfigError``
saying the server is busy), never with an allocation failure halfway through.

``POOL`` is the one process-wide instance: it holds counters and a condition variable, never a
user's data (like ``explorer.runtime.load.LOAD``).
"""

from __future__ import annotations

import contextlib
import resource
import threading
import time

from explorer.runtime import settings
from models import ConfigError

FALLBACK = 4 << 30  # what is assumed available where nothing can be read (not Linux)


def _meminfo() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _cgroup() -> int | None:
    """What the process's cgroup (v2) still allows: ``memory.max - memory.current``."""
    try:
        with open("/sys/fs/cgroup/memory.max") as f:
            limit = f.read().strip()
        if limit == "max":
            return None
        with open("/sys/fs/cgroup/memory.current") as f:
            return max(0, int(limit) - int(f.read().strip()))
    except (OSError, ValueError):
        return None


def _address_space() -> int | None:
    """What ``RLIMIT_AS`` (``prlimit --as``) still allows: the limit minus the mapped ``VmSize``."""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return None
    try:
        with open("/proc/self/status") as f:
            size = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
    except (OSError, StopIteration):
        return None
    return max(0, soft - size)


def available_bytes() -> int:
    """Bytes this process may still allocate now: the least of the machine's ``MemAvailable``, its
    cgroup's headroom and its address-space headroom."""
    found = [v for v in (_meminfo(), _cgroup(), _address_space()) if v is not None]
    return min(found) if found else FALLBACK


OOM_WORDS = (
    "out of memory",
    "can't allocate memory",
    "not enough memory",
    "cannot allocate memory",
    "failed to allocate",
)


def is_out_of_memory(exc: BaseException) -> bool:
    """Out of memory, from Python or from torch's allocator (CPU or CUDA)."""
    if isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError":
        return True
    return isinstance(exc, RuntimeError) and any(w in str(exc).lower() for w in OOM_WORDS)


class Busy(ConfigError):
    """The server cannot take this job right now (its memory or its slots are held by other work); the
    message says so plainly and when to try again (``field`` is "server")."""

    def __init__(self, message: str):
        super().__init__("server", "busy", message)
        self.args = (message,)

    def __str__(self) -> str:
        return self.allowed


class MemoryPool:
    def __init__(self, total: int | None = None):
        self._total = total
        self._held = 0
        self._cond = threading.Condition()

    @property
    def total(self) -> int:
        """The pool's size: ``EXPLORER_SERVER_MEMORY`` when set (read each time), else fixed at first use."""
        if settings.server_memory_set():
            return settings.server_memory(available_bytes())
        if self._total is None:
            self._total = settings.server_memory(available_bytes())
        return self._total

    def held(self) -> int:
        with self._cond:
            return self._held

    @contextlib.contextmanager
    def reserve(self, nbytes: int, what: str = "this request", wait_s: float = 15.0):
        """Hold ``nbytes`` of the pool for the enclosed work (see the module docstring)."""
        nbytes = max(0, int(nbytes))
        if nbytes > self.total:
            raise ConfigError(
                "memory",
                f"{nbytes / 2**30:.2f} GiB",
                f"at most {self.total / 2**30:.2f} GiB, all the memory this server lends to work at "
                f"once ({settings.SERVER_MEMORY}); make {what} smaller",
            )
        deadline = time.monotonic() + wait_s
        with self._cond:
            while self._held + nbytes > self.total:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise Busy(
                        f"The server is busy: the {nbytes / 2**20:,.0f} MiB {what} needs are held by other "
                        "visitors' work right now; try again in a minute."
                    )
                self._cond.wait(timeout=min(left, 0.5))
            self._held += nbytes
        try:
            yield nbytes
        finally:
            with self._cond:
                self._held -= nbytes
                self._cond.notify_all()


POOL = MemoryPool()
