"""The analyses' one memo: models and results in a cache bounded in bytes, shared by every request.

``CACHE`` (``explorer.runtime.cache.ByteLRU``, ``EXPLORER_CACHE_BYTES``) holds each config's model
(built once, eval mode, no gradients, shared read-only) and the results computed from it, keyed by
the config, the inputs and the digest of the trained weights in use (None: initial weights), so two
sessions never see each other's weights and redrawing a config costs nothing. After a request
predicted to need ``TRIM_AFTER`` bytes or more, the freed heap goes back to the system
(``malloc_trim``). A computation holds its predicted bytes in the server's memory pool
(``explorer.runtime.pool``) while it runs. No per-user state lives here.
"""
from __future__ import annotations

from explorer.analysis.weights import TrainedWeights
from explorer.runtime.cache import TRIM_AFTER, ByteLRU, release_memory
from explorer.runtime.device import device
from explorer.runtime.pool import POOL
from models import build_model

CACHE = ByteLRU()


def weights_key(weights: TrainedWeights | None):
    """What the cache keys trained weights by: their digest (None for the initial weights)."""
    return None if weights is None else weights.digest


def eval_model(cfg, weights: TrainedWeights | None = None):
    """The model of a validated config (initial or ``weights``), built once and shared read-only."""
    def make():
        model = build_model(cfg)
        if weights is not None:
            weights.load_into(model)
        model = model.to(device()).eval()
        model.requires_grad_(False)
        return model
    return CACHE.get(("model", cfg.to_json(), weights_key(weights)), make)


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


def clear_caches() -> None:
    """Forget every memoised model and result (benchmarks time the uncached path)."""
    CACHE.clear()
