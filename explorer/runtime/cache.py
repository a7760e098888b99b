"""A memo bounded in bytes, and giving freed memory back to the system.

``functools.lru_cache(maxsize=4)`` bounds entries, not bytes: four large MoE models pinned ~12 GB.
``ByteLRU`` keeps the most recently used results while the bytes of the tensors and arrays they
hold stay within ``max_bytes`` (``EXPLORER_CACHE_BYTES``: bytes like ``"1G"`` or a fraction of the
available memory like ``"0.1"``; default a tenth of the available memory, at most 1 GiB). A result
larger than the whole budget is returned but not kept.

Freed tensors go back to glibc's heap, not to the system, so the process's RSS stays at its high
water mark after a big request. ``release_memory()`` calls ``malloc_trim(0)`` (glibc only; a no-op
elsewhere); the cache calls it once its evictions since the last trim add up to ``TRIM_AFTER``
bytes, and the analyses after a large request, so RSS returns near its baseline.

Thread-safe: one lock guards the table; values are computed outside it (two threads asking for the
same new key may both compute it; the second result replaces the first, both are correct).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import dataclasses
import threading
from collections import OrderedDict

import numpy as np
import torch

from explorer.runtime import settings
from explorer.runtime.pool import available_bytes

__all__ = ["ByteLRU", "nbytes", "release_memory", "cache_budget"]

TRIM_AFTER = 32 << 20  # evicting or finishing something this big is worth a malloc_trim


def cache_budget() -> int:
    """Bytes the cache may hold now (``settings.cache_bytes`` of the available memory)."""
    return settings.cache_bytes(available_bytes())


def nbytes(value, _seen=None) -> int:
    """Bytes held by ``value``: tensors (a module's parameters and buffers), NumPy arrays, and the
    containers and dataclasses around them; 64 bytes per other Python object (a rough floor)."""
    seen = _seen if _seen is not None else set()
    if id(value) in seen:
        return 0
    seen.add(id(value))
    if isinstance(value, torch.nn.Module):
        return sum(nbytes(t, seen) for t in [*value.parameters(), *value.buffers()])
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, np.ndarray):
        return int(value.nbytes) if value.base is None else nbytes(value.base, seen)
    if isinstance(value, (str, bytes)):
        return len(value)
    if isinstance(value, dict):
        return 64 + sum(nbytes(k, seen) + nbytes(v, seen) for k, v in value.items())
    if isinstance(value, (list, tuple, set, frozenset)):
        return 64 + sum(nbytes(v, seen) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return 64 + sum(nbytes(getattr(value, f.name), seen) for f in dataclasses.fields(value))
    return 64


def _malloc_trim():
    if not hasattr(ctypes, "CDLL"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        fn = libc.malloc_trim
    except (OSError, AttributeError):  # not glibc (macOS, musl): nothing to trim
        return None
    fn.argtypes, fn.restype = [ctypes.c_size_t], ctypes.c_int
    return fn


_TRIM = _malloc_trim()


def release_memory() -> bool:
    """Give the heap's free pages back to the system (glibc ``malloc_trim(0)``); True if it ran."""
    if _TRIM is None:
        return False
    _TRIM(0)
    return True


class ByteLRU:
    """Least-recently-used memo bounded by the bytes of its values (``nbytes``) and by ``max_entries``."""

    def __init__(self, max_bytes: int | None = None, max_entries: int = 256):
        self.max_bytes = int(max_bytes if max_bytes is not None else cache_budget())
        self.max_entries = int(max_entries)
        self._items: OrderedDict = OrderedDict()  # key -> (value, bytes)
        self._lock = threading.Lock()
        self.bytes = 0
        self._freed = 0  # bytes evicted since the last malloc_trim (many small evictions add up)

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def __contains__(self, key) -> bool:
        with self._lock:
            return key in self._items

    def get(self, key, compute):
        """The cached value of ``key``, or ``compute()`` stored under it (if it fits)."""
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key][0]
        value = compute()
        self.put(key, value)
        return value

    def put(self, key, value) -> None:
        size = nbytes(value)
        evicted = 0
        with self._lock:
            if key in self._items:
                self.bytes -= self._items.pop(key)[1]
            if size <= self.max_bytes:
                self._items[key] = (value, size)
                self.bytes += size
            while self._items and (self.bytes > self.max_bytes or len(self._items) > self.max_entries):
                old = self._items.popitem(last=False)[1][1]  # the value itself is not kept alive here
                self.bytes -= old
                evicted += old
            self._freed += evicted
            trim = self._freed >= TRIM_AFTER
            if trim:
                self._freed = 0
        if trim:
            release_memory()

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self.bytes = 0
        release_memory()
