"""The app's per-request memory budget: one request that would not fit is refused before it allocates.

``check(cfg, kind, seq_len, batch)`` predicts the request's footprint (``models.footprint``: the
weights counted exactly on the meta device, the activations from their shapes, an upper bound
checked against measured peaks in the tests) and raises ``ConfigError`` when it exceeds
``request_budget()``. The message says how much the request needs, what the budget is, and which
fields to shrink, ranked by how much halving each would save.

The budget follows the machine: ``EXPLORER_REQUEST_BUDGET`` sets it, either in bytes (``"2G"``,
``"512M"``, ``"1500000000"``) or as a fraction of the memory available right now (``"0.2"``);
unset, it is a quarter of the available memory (``/proc/meminfo`` ``MemAvailable``), at most
``settings.MAX_DEFAULT_BUDGET``. Every entry point (the UI, the API, share links, uploaded files, the sweep
per length) calls ``check`` with the request it is about to run.
"""

from __future__ import annotations

from explorer.runtime import settings
from explorer.runtime.pool import POOL, available_bytes
from models import ConfigError, ModelConfig
from models.footprint import footprint

__all__ = ["check", "request_budget", "predict", "human", "available_bytes"]

# fields a visitor can shrink, tried in this order when naming what to shrink (the request's own
# length and batch are tried too)
SHRINKABLE = (
    "n_layers",
    "d_model",
    "d_ff",
    "n_experts",
    "n_heads",
    "vocab_size",
    "max_len",
    "proj_len",
    "knn_size",
    "n_features",
    "n_landmarks",
    "chunk_size",
    "n_buckets",
    "n_hashes",
    "mem_len",
    "cmem_len",
    "n_memory",
    "knn_k",
    "top_k",
    "n_clusters",
)


def human(n: float) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


def request_budget() -> int:
    """Bytes one request may use now (``settings.request_budget`` of the available memory, within the
    server's pool)."""
    return settings.request_budget(available_bytes(), POOL.total)


TRAIN = "train"  # a training step: a forward and backward, plus the optimizer's two moments per parameter


def predict(cfg: ModelConfig, kind: str, seq_len: int, batch: int = 1) -> int:
    """Predicted peak bytes of one request (weights + activations), see ``models.footprint``; ``"train"``
    adds AdamW's two float32 moments per parameter to a forward and backward."""
    if kind == TRAIN:
        fp = footprint(cfg, "forward_backward", seq_len, batch)
        return fp.total + 2 * fp.param_bytes
    return footprint(cfg, kind, seq_len, batch).total


def _halved(cfg: ModelConfig, name: str):
    value = getattr(cfg, name)
    if value is None or value <= 1:
        return None
    try:
        return cfg.replace(**{name: max(1, value // 2)}).validate()
    except (ConfigError, ValueError):
        return None


def _what_to_shrink(cfg: ModelConfig, kind: str, seq_len: int, batch: int, need: int) -> list:
    """``[(field, value, bytes saved by halving it)]``, best first (fields the request depends on)."""
    savings = []
    for name in SHRINKABLE:
        smaller = _halved(cfg, name)
        if smaller is not None:
            saved = need - predict(smaller, kind, seq_len, batch)
            if saved > 0.05 * need:
                savings.append((name, getattr(cfg, name), saved))
    if seq_len > 1:
        saved = need - predict(cfg, kind, max(1, seq_len // 2), batch)
        if saved > 0.05 * need:
            savings.append(("text length" if kind == "attention" else "seq_len", seq_len, saved))
    if batch > 1:
        saved = need - predict(cfg, kind, seq_len, max(1, batch // 2))
        if saved > 0.05 * need:
            savings.append(("batch", batch, saved))
    return sorted(savings, key=lambda s: -s[2])


def check(cfg: ModelConfig, kind: str, seq_len: int, batch: int = 1) -> int:
    """Refuse (ConfigError) a request predicted to exceed the budget; return the predicted bytes.

    ``kind``: ``"attention"`` (maps of ``seq_len`` tokens), ``"train"`` (an optimizer step of a ``(batch,
    seq_len)`` batch), ``"gradients"`` (forward + backward of a
    ``(batch, seq_len)`` batch), ``"forward"`` or ``"forward_backward"`` (a sweep point).
    """
    need = predict(cfg, kind, seq_len, batch)
    budget = request_budget()
    if need <= budget:
        return need
    ranked = _what_to_shrink(cfg, kind, seq_len, batch, need)
    hints = ", ".join(f"{n} (now {v}; halving it saves {human(s)})" for n, v, s in ranked[:4])
    field = ranked[0][0] if ranked else "config"
    value = ranked[0][1] if ranked else None
    raise ConfigError(
        field,
        value,
        f"this {kind} request at length {seq_len} needs about {human(need)}, over "
        f"the explorer's per-request memory budget of {human(budget)}; shrink "
        f"{hints or 'the model'}",
    )
