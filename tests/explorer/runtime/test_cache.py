"""explorer.runtime.cache: bounded by the bytes its values hold (not by entries), least recently used first,
thread-safe; and the process's RSS comes back near its baseline after a large request."""

import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

from explorer.runtime.cache import ByteLRU, nbytes, release_memory

ROOT = Path(__file__).resolve().parents[3]
MB = 1 << 20


def _block(mb: float) -> np.ndarray:
    return np.zeros(int(mb * MB), dtype=np.uint8)


def test_nbytes_counts_tensors_arrays_modules_and_their_containers():
    @dataclass
    class Result:
        a: np.ndarray
        t: torch.Tensor
        meta: dict

    r = Result(np.zeros((10, 10), np.float32), torch.zeros(5, dtype=torch.float64), {"x": [torch.zeros(3)]})
    assert nbytes(r) >= 400 + 40 + 12 and nbytes(r) < 400 + 40 + 12 + 1024
    lin = torch.nn.Linear(4, 3)
    assert nbytes(lin) == (12 + 3) * 4
    arr = np.zeros(1000, np.float32)
    assert nbytes([arr, arr[:10]]) - 64 == 4000  # a view and a repeat of the same array count once


def test_bounded_in_bytes_least_recently_used_first():
    cache = ByteLRU(max_bytes=int(3.5 * MB))
    for k in "abc":
        cache.put(k, _block(1))
    assert cache.get("a", lambda: None) is not None  # "a" is now the most recent
    cache.put("d", _block(1))  # over 3.5 MB: the least recently used ("b") goes
    assert "b" not in cache and all(k in cache for k in "acd")
    assert cache.bytes == nbytes(_block(1)) * 3 <= cache.max_bytes
    big = cache.get("huge", lambda: _block(4))  # larger than the whole budget: returned, not kept
    assert big.nbytes == 4 * MB and "huge" not in cache and len(cache) == 3
    calls = []
    cache.get("a", lambda: calls.append(1))
    assert not calls  # a hit does not compute
    cache.clear()
    assert len(cache) == 0 and cache.bytes == 0


def test_entry_bound_and_threads():
    cache = ByteLRU(max_bytes=50 * MB, max_entries=8)
    sizes = {}

    def work(t):
        for i in range(40):
            key = (t, i % 12)
            value = _block(0.25 + 0.01 * (i % 5))
            sizes[key] = nbytes(value)
            cache.get(key, lambda v=value: v)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(cache) <= 8
    kept = [k for k in sizes if k in cache]
    assert cache.bytes == sum(sizes[k] for k in kept) <= cache.max_bytes


def test_release_memory_runs_on_glibc():
    import platform

    if platform.system() == "Linux" and platform.libc_ver()[0] == "glibc":
        assert release_memory() is True


RSS_SCRIPT = r"""
import gc, json
import torch
torch.set_num_threads(1)

from models import ModelConfig
from explorer.analysis import attention_maps, clear_caches, gradient_norms

def rss():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmRSS:"))

small = ModelConfig(n_layers=1, d_model=16, n_heads=1)
gradient_norms(small, 16, 2); attention_maps(small, "warm")  # one-time costs first
clear_caches(); gc.collect()
base = rss()
big = ModelConfig(n_layers=8, d_model=384, n_heads=8, d_ff=1536)
gradient_norms(big, 128, 8)
attention_maps(big, "x" * 256)
peak = rss()
clear_caches(); gc.collect()
print(json.dumps({"base": base, "peak": peak, "after": rss()}))
"""


@pytest.mark.slow
def test_rss_returns_near_its_baseline_after_a_big_request():
    out = subprocess.run([sys.executable, "-c", RSS_SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    r = __import__("json").loads(out.stdout.strip().splitlines()[-1])
    grown = r["peak"] - r["base"]
    assert grown > 50 * MB  # the request was big (the cached model and maps alone are ~60 MB)
    assert r["after"] - r["base"] < 0.2 * grown, r
