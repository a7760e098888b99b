"""Axial attention: Ho, Kalchbrenner, Weissenborn & Salimans 2019, "Axial Attention in
Multidimensional Transformers".

The sequence is laid out as a 2-D grid of rows of ``W = axial_width`` positions: position ``i`` sits
at row ``i // W``, column ``i % W``; the last row is padded (padding is never attended). Every layer
splits its heads: the first ``ceil(h / 2)`` heads attend along their row (keys of the same row), the
others along their column (keys of the same column, ``W`` positions apart). Splitting heads (rather
than alternating row and column layers) needs no layer index and gives every layer both axes, so two
layers connect any two positions of a bidirectional model. Causal: keys ``j > i`` are masked on both
axes (the paper's masked row / column attention), so a query reaches the past through at most one
row and one column hop; positions of an earlier row and a later column stay out of reach, which the
paper closes with its shifted "unmasked row" layer (not built here).

Scores are ordinary scaled dot products (softmax per axis), so rope applies to q, k, and a score
bias (``t5``, ``alibi``) is added for the true distance ``j - i`` of each pair (``c' - c`` on a row,
``(r' - r) W`` on a column). The effective attention ``[B, h, L, L]`` is each head's axis softmax
placed at the key positions it used; every real query sees itself on its axis, so rows sum to 1.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..capabilities import ROTARY, SCORE_BIAS, AttentionCaps
from ..errors import ConfigError
from ..variant import Param, Variant
from .common import NEG, expand_kv, pair_bias, scatter_dense

AXIAL_WIDTH = Param("axial_width", int, 32, range=(1, 1 << 16), cap=1024, surgery=True)  # the row width


def axis_attention(q, k, v, pos, mods, cfg, lk: int, head0: int):
    """Softmax along the last-but-one axis of a grid: ``q, k, v [B, h, A, N, d]`` (``A`` lines of
    ``N`` positions each), ``pos [A, N]`` absolute positions (``>= lk`` is padding).

    Returns ``out [B, h, A, N, d]``, ``p [B, h, A, N, N]`` and the pair positions for display.
    ``head0`` is the first global head of this group (selects the per-head bias).
    """
    d = q.shape[-1]
    s = torch.einsum("bhaqd,bhakd->bhaqk", q, k) / math.sqrt(d)  # (B, h, A, N, N)
    if cfg.softcap is not None:
        s = cfg.softcap * torch.tanh(s / cfg.softcap)
    pq, pk = pos[:, :, None], pos[:, None, :]  # (A, N, 1), (A, 1, N)
    rel = (pk - pq).expand(q.shape[0], q.shape[1], -1, -1, -1)  # (B, h, A, N, N): j - i
    hs = q.shape[1]
    sub = {n: t[head0 : head0 + hs] for n, t in mods.items() if n in ("rel_bias", "alibi_slopes")}
    bias = pair_bias(sub, rel, lk, hs)
    if bias is not None:
        s = s + bias
    allowed = (pk < lk).expand_as(rel)
    if cfg.causal:
        allowed = allowed & (rel <= 0)
    p = torch.softmax(s.masked_fill(~allowed, NEG), dim=-1)
    p = torch.where(allowed, p, 0.0)
    out = p @ v
    valid = allowed & (pq < lk)
    return out, p, pq.expand_as(rel), pk.expand_as(rel), valid


class AxialAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg

    def forward(self, q, k, v, mods, ctx):
        cfg = self.cfg
        B, h, L, d = q.shape
        dtype = q.dtype
        k, v = expand_kv(k, h), expand_kv(v, h)
        work = torch.promote_types(q.dtype, torch.float32)  # at least fp32, float64 kept
        W = min(cfg.axial_width, L)
        R = -(-L // W)
        pad = R * W - L
        grid = torch.arange(R * W, device=q.device).view(R, W)  # (R, W) absolute positions
        q, k, v = (F.pad(t.to(work), (0, 0, 0, pad)).view(B, h, R, W, d) for t in (q, k, v))  # (B, h, R, W, d_h)
        hr = (h + 1) // 2  # row heads; the rest are column heads
        row = axis_attention(q[:, :hr], k[:, :hr], v[:, :hr], grid, mods, cfg, L, 0)
        outs, parts = [row[0].reshape(B, hr, R * W, d)], [row]
        if h > hr:
            t = lambda x: x[:, hr:].transpose(2, 3)  # noqa: E731  (B, h - hr, W, R, d_h): lines are columns
            col = axis_attention(t(q), t(k), t(v), grid.T, mods, cfg, L, hr)
            outs.append(col[0].transpose(2, 3).reshape(B, h - hr, R * W, d))
            parts.append(col)
        out = torch.cat(outs, dim=1)[:, :, :L].to(dtype)  # (B, h, L, d_h)
        probs = None
        if ctx.need_weights:
            probs = torch.cat([scatter_dense(p, pq, pk, L, L, valid) for _, p, pq, pk, valid in parts], dim=1)
            probs = probs.to(dtype)
        return out, probs, {}


def check(cfg) -> None:
    if cfg.n_heads < 2:
        raise ConfigError(
            "n_heads",
            cfg.n_heads,
            "an integer >= 2 with attention='axial': half the heads attend along the row, half along "
            "the column, so one head would never look across rows",
        )


CAPS = AttentionCaps(
    accepts=frozenset({ROTARY, SCORE_BIAS}),
    memory_keys=False,
    refuses_because=(
        "adds no relative key/value vectors along its axes (scalar biases such as t5 / alibi and rope work)"
    ),
)

VARIANTS = (
    Variant(
        "axial",
        "Ho et al. 2019 (Axial Attention)",
        "The sequence is folded into rows of axial_width; half the heads attend along the row, half along the column.",
        build=AxialAttention,
        params=(AXIAL_WIDTH,),
        check=check,
        caps=CAPS,
        surgery=True,
    ),
)
