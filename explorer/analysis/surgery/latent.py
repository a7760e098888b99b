"""A trained model's keys and values through a shared low-rank latent: the MLA-style conversion of an MHA / GQA
model by SVD (TransMLA, Meng et al. 2025; MHA2MLA, Ji et al. 2025), scored without any fine-tuning.

Per layer, the key and value projections are stacked, ``W = [W_k; W_v]`` (``2 h_kv d_h x d``), and cut to their
best rank-``r`` approximation ``W_r = U_r S_r V_r^T`` (Eckart-Young). The cache then holds ``c = V_r^T x``, ``r``
numbers per token and layer, instead of ``2 h_kv d_h``: the keys ``U_k S_r c`` (plus their bias) and values
``U_v S_r c`` are rebuilt from it, and the keys are rotated by RoPE after the up-projection, so the latent is
what a decoder keeps (the up-projection cannot be folded into the queries under RoPE, which is why MLA adds a
decoupled RoPE key; here the keys are simply rebuilt from the latent). Scoring the model with ``W_r`` in place
of ``W`` is exactly scoring the latent cache. The rank ``min(2 h_kv d_h, d)`` is lossless: the stacked
projection of a ``d``-wide input has no larger rank, so an MHA model with ``2 h d_h = 2 d`` caches half as much
for free.
"""

from __future__ import annotations

import copy

import torch

from explorer.analysis.surgery.loss import nats_per_token
from models.qkv import QKVProjection

FRACTIONS = (1 / 2, 3 / 8, 1 / 4, 1 / 8, 1 / 16)  # of the full 2 h_kv d_h numbers per token and layer
BYTES_PER_VALUE = 2  # fp16, as the KV-cache figures count


def projections(model) -> list:
    """The self-attention projections with separate K and V weights (MLA's own ones have none)."""
    return [m for m in model.modules() if isinstance(m, QKVProjection) and hasattr(m, "k_proj")]


def ranks(cfg) -> list:
    """The latent widths tried for ``cfg``: the lossless one when it is below the full width, then fractions of
    the full ``2 h_kv d_h``, largest first."""
    full = 2 * cfg.kv_heads * cfg.d_head
    out = {max(1, round(full * f)) for f in FRACTIONS}
    if cfg.d_model < full:
        out.add(cfg.d_model)
    return sorted((r for r in out if r < full), reverse=True)


def low_rank_kv(model, rank: int):
    """A copy of ``model`` whose every K/V projection pair is its joint rank-``rank`` SVD approximation."""
    model = copy.deepcopy(model)
    with torch.no_grad():
        for proj in projections(model):
            wk, wv = proj.k_proj.weight, proj.v_proj.weight
            w = torch.cat([wk, wv]).double()  # (2 h_kv d_h, d)
            u, s, vt = torch.linalg.svd(w, full_matrices=False)
            r = min(rank, s.numel())
            approx = (u[:, :r] * s[:r]) @ vt[:r]
            proj.k_proj.weight.copy_(approx[: wk.shape[0]].to(wk.dtype))
            proj.v_proj.weight.copy_(approx[wk.shape[0] :].to(wv.dtype))
    return model


def latent_rows(model, cfg, data: list, lengths: tuple) -> list:
    """One row per rank of ``ranks(cfg)``: label, rank, the cache bytes per token (``rank`` fp16 numbers per
    layer; every key kept) and the held-out loss at each length. Empty for a model without K/V projections."""
    if not projections(model):
        return []
    out = []
    for r in ranks(cfg):
        scored = low_rank_kv(model, r)
        out.append(
            {
                "label": f"K/V latent rank {r} (joint SVD)",
                "rank": r,
                "cache_bytes_per_token": {str(L): r * cfg.n_layers * BYTES_PER_VALUE for L in lengths},
                "loss": {str(L): round(nats_per_token(scored, data, L), 4) for L in lengths},
            }
        )
    return out
