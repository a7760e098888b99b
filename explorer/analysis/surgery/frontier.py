"""The KV-cache frontier of a trained model: for every way to shrink what a decoder caches, measured on the
model's own weights, the cache it keeps per token against the held-out loss it costs.

The points are rows of the model's Surgery table (``tabulate.table``: each scored on the held-out passage at
the trained length and at 4x it) that shrink the cache, plus the latent rows (``latent.py``: the K/V
projections through a joint SVD at several ranks). ``family`` sorts a row into one way of shrinking:

- ``as trained``: the model itself (the reference point);
- ``fewer K/V heads``: heads merged by mean-pooling (GQA / MQA from a trained MHA, Ainslie et al. 2023);
- ``latent (joint K/V SVD)``: an MLA-style latent cache (TransMLA, MHA2MLA), no fine-tuning;
- ``window`` / ``window + sinks``: a causal local pattern (sliding window, dilated window, block, chunk) whose
  cache holds its span (plus the kept first tokens, StreamingLLM's sinks);
- ``per-layer schedule``: some layers windowed, the others full (Gemma 2 / gpt-oss 1:1, Gemma 3-like 3:1).

A row whose cache is the model's own (another mechanism on the same keys) shrinks nothing and is left out.
``cache_bytes_per_token`` is the bytes held after ``L`` tokens divided by ``L`` (fp16 keys and values, every
layer: ``explorer.analysis.cost.summary.kv_cache_bytes``), so a window's point moves left as ``L`` grows.
"""

from __future__ import annotations

from explorer.analysis.cost.summary import kv_cache_bytes
from models.schedule import LOCAL

FAMILIES = (
    "as trained",
    "fewer K/V heads",
    "latent (joint K/V SVD)",
    "window",
    "window + sinks",
    "per-layer schedule",
)


def cache_per_token(cfg, lengths) -> dict:
    """``{str(L): bytes cached after L tokens / L}`` of ``cfg`` (fp16)."""
    got = kv_cache_bytes(cfg, list(lengths))["current"]
    return {str(L): round(b / L, 2) for L, b in zip(lengths, got)}


def family(base, cfg, label: str) -> str | None:
    """The way ``cfg`` shrinks ``base``'s cache (``FAMILIES``), or None for a row that is no such way."""
    if label.endswith("(as trained)") and cfg == base:
        return "as trained"
    if cfg.layer_schedule != base.layer_schedule:
        return "per-layer schedule"
    if cfg.kv_heads < base.kv_heads and cfg.attention == base.attention:
        return "fewer K/V heads"
    if cfg.attention in LOCAL and cfg.causal and cfg.ablate_heads == base.ablate_heads:
        return "window + sinks" if cfg.n_sinks else "window"
    return None


def points(table: dict) -> list:
    """The frontier's points of a stored table: ``{label, family, length, bytes, loss}`` for each scored length
    of each row with a family (a length a row could not score is left out)."""
    out = []
    for row in [*table.get("rows", []), *({**r, "family": FAMILIES[2]} for r in table.get("latent", []))]:
        fam, cache = row.get("family"), row.get("cache_bytes_per_token")
        if fam is None or cache is None:
            continue
        for L in table["lengths"]:
            loss = row["loss"].get(str(L))
            if loss is not None and cache.get(str(L)) is not None:
                out.append({"label": row["label"], "family": fam, "length": L, "bytes": cache[str(L)], "loss": loss})
    return out
