"""Dense softmax attention split at the score matrix (a leaf module of the attention package).

Mechanisms that change the *pre-softmax scores* (talking-heads mixing, RealFormer's residual
scores, predictive attention priors) need the score matrix itself, which the kernels never hand
back. ``dense_scores`` computes it with exactly the conventions of ``kernels.attention_ref``
(``kernels/reference.py``: ``scale * (q.k + q.rel_k)``, then softcap, then ``rel_bias`` and ALiBi;
queries are the last ``Lq`` of the ``Lk`` key positions), ``allowed_pairs`` the causal mask, and
``attend`` applies probabilities to the values (plus ``rel_v``), so every position modifier and
memory keys before the segment are honoured as on the dense path.
"""

from __future__ import annotations

import math

import torch

from kernels.reference import clipped_index, relative_positions

from .common import expand_kv


def dense_scores(q, k, mods: dict, softcap=None) -> torch.Tensor:
    """``q [B, h, Lq, d]``, ``k [B, h_kv, Lk, d]`` -> unmasked scores ``[B, h, Lq, Lk]`` (at least fp32)."""
    B, h, lq, d = q.shape
    lk = k.shape[2]
    k = expand_kv(k, h)
    rel = relative_positions(lq, lk, q.device)  # (Lq, Lk): j - i_abs
    s = q @ k.transpose(-1, -2)  # (B, h, Lq, Lk)
    rel_k = mods.get("rel_k")
    if rel_k is not None:
        qr = q @ rel_k.transpose(-1, -2)  # (B, h, Lq, R)
        s = s + qr.gather(-1, clipped_index(rel, rel_k.shape[-2]).expand(B, h, lq, lk))
    acc = torch.promote_types(q.dtype, torch.float32)
    s = s.to(acc) * (1.0 / math.sqrt(d))
    if softcap is not None:
        s = softcap * torch.tanh(s / softcap)
    rel_bias, slopes = mods.get("rel_bias"), mods.get("alibi_slopes")
    if rel_bias is not None:
        s = s + rel_bias.to(acc)[:, rel + lk - 1]
    if slopes is not None:
        s = s - slopes.to(acc)[:, None, None] * rel.abs()
    return s


def allowed_pairs(lq: int, lk: int, causal: bool, device=None) -> torch.Tensor:
    """``[Lq, Lk]`` bool: every pair, or ``j <= i_abs`` when causal (memory keys come first)."""
    rel = relative_positions(lq, lk, device)
    return rel <= 0 if causal else torch.ones(lq, lk, dtype=torch.bool, device=device)


def masked_softmax(s: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    return torch.softmax(s.masked_fill(~allowed, float("-inf")), dim=-1)


def attend(p: torch.Tensor, v: torch.Tensor, mods: dict) -> torch.Tensor:
    """``p [B, h, Lq, Lk]`` (any weights) applied to ``v [B, h_kv, Lk, d]`` plus Shaw's ``rel_v``."""
    B, h, lq, lk = p.shape
    p = p.to(v.dtype)
    out = p @ expand_kv(v, h)  # (B, h, Lq, d)
    rel_v = mods.get("rel_v")
    if rel_v is not None:
        idx = clipped_index(relative_positions(lq, lk, p.device), rel_v.shape[-2]).expand(B, h, lq, lk)
        w = torch.zeros(B, h, lq, rel_v.shape[-2], dtype=p.dtype, device=p.device)
        out = out + w.scatter_add(-1, idx, p) @ rel_v  # (B, h, Lq, R) @ (h or 1, R, d)
    return out
