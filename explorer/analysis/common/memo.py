"""The analyses' one memo: models and results in a cache bounded in bytes, shared by every request.

``CACHE`` (``explorer.runtime.cache.ByteLRU``, ``EXPLORER_CACHE_BYTES``) holds each config's model
(built once, eval mode, no gradients, shared read-only) and the results computed from it, keyed by
the config, the inputs and the digest of the trained weights in use (None: initial weights), so two
sessions never see each other's weights and redrawing a config costs nothing. After a request
predicted to need ``TRIM_AFTER`` bytes or more, the freed heap goes back to the system
(``malloc_trim``). A computation holds its predicted bytes in the server's memory pool
(``explorer.runtime.pool``) while it runs. No per-user state lives here.

The results are memoised on the caller's side of the GPU calls (``explorer.runtime.device``): an
analysis builds a ``Request`` (checked, keyed, its GPU function and picklable arguments), and only a
miss makes a GPU call; ``fetch`` computes several misses in one (a Compare click's six analyses). The
models are memoised where they run, per device.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from explorer.analysis.weights.trained import TrainedWeights
from explorer.runtime.cache import TRIM_AFTER, ByteLRU, release_memory
from explorer.runtime.device import DEFAULT_DURATION, device, gpu
from explorer.runtime.pool import POOL
from models import build_model

CACHE = ByteLRU()
MAX_BATCH_S = 120  # seconds of GPU one batch of analyses asks for at most


def weights_key(weights: TrainedWeights | None):
    """What the cache keys trained weights by: their digest (None for the initial weights)."""
    return None if weights is None else weights.digest


def eval_model(cfg, weights: TrainedWeights | None = None):
    """The model of a validated config (initial or ``weights``), built once and shared read-only."""

    def make():
        model = build_model(cfg) if weights is None else weights.eval_model(cfg)
        model = model.to(device()).eval()
        model.requires_grad_(False)
        return model

    # per device: the start-up paint builds it on the CPU (``on_cpu``), the GPU calls on CUDA
    return CACHE.get(("model", cfg, weights_key(weights), str(device())), make)


def memo(key: tuple, compute, need: int = 0):
    """``compute()`` memoised under ``key`` (a tuple starting with the result's name). Computing holds
    the ``need`` bytes the request was predicted to use in the server's memory pool (waiting, or
    refused as busy, while other work holds the pool); a request of ``TRIM_AFTER`` bytes or more hands
    its freed heap back to the system once done."""

    def run():
        with POOL.reserve(need, f"this {key[0]} request"):
            try:
                return compute()
            finally:
                if need >= TRIM_AFTER:
                    release_memory()

    return CACHE.get(key, run)


@dataclass(frozen=True)
class Request:
    """One analysis, checked and keyed on the caller's side: ``fn(*args)`` (a GPU function, picklable
    arguments) computes the value memoised under ``key``, predicted to need ``need`` bytes."""

    key: tuple
    need: int
    fn: Callable
    args: tuple

    def compute(self):
        return self.fn(*self.args)


def _batch_duration(jobs) -> int:
    return min(MAX_BATCH_S, sum(int(getattr(fn, "gpu_duration", DEFAULT_DURATION)) for fn, _ in jobs))


@gpu(duration=_batch_duration)
def compute_batch(jobs: list) -> list:
    """``[fn(*args) for fn, args in jobs]`` in one GPU call (each ``fn`` a GPU function, run directly)."""
    return [fn(*args) for fn, args in jobs]


def fetch(requests: list) -> list:
    """Each request's value: from the memo, or, for those not memoised yet, computed together in one GPU
    call (``compute_batch``, holding the largest ``need`` in the server's pool) and memoised."""
    missing = list({r.key: r for r in requests if r.key not in CACHE}.values())
    if missing:
        need = max(r.need for r in missing)
        with POOL.reserve(need, f"these {len(missing)} {missing[0].key[0]} requests"):
            try:
                values = compute_batch([(r.fn, r.args) for r in missing])
            finally:
                if need >= TRIM_AFTER:
                    release_memory()
        for r, value in zip(missing, values):
            CACHE.put(r.key, value)
    return [memo(r.key, r.compute, need=r.need) for r in requests]  # evicted meanwhile: computed again


def clear_caches() -> None:
    """Forget every memoised model and result (benchmarks time the uncached path)."""
    CACHE.clear()
