"""Poolingformer: Zhang et al. 2021, "Poolingformer: Long Document Modeling with Pooling Attention".

Two levels of attention per head:

1. Sliding window: ``y_i = softmax_j(q_i . k_j / sqrt(d_h)) v_j`` over ``|i - j| < window``
   (causal: ``0 <= i - j < window``), the ``sliding_window`` pattern, block-sparse.
2. Pooling attention over a larger window: the keys and values are mean-pooled in consecutive
   groups of ``pool_stride`` (group ``g`` = keys ``g*s .. min((g+1)*s, L) - 1``); the query is the
   first level's output, ``q2_i = y_i W_h`` (a learned ``d_h x d_h`` map per head), and it attends
   the groups lying entirely inside its larger window: every key of the group within
   ``|i - j| < pool_window`` (causal: the whole group at or before ``i``, so nothing leaks):
   ``z_i = softmax_g(q2_i . kbar_g / sqrt(d_h)) vbar_g``.

Output: ``(y_i + z_i) / 2``, or ``y_i`` for a query with no complete group in its window (early
tokens of a causal model). The paper adds the two levels; the mean keeps the output a convex
combination of the values (its effective attention ``(P1 + P2 M) / 2``, ``M`` spreading a group's
weight evenly over its keys, has rows summing to one) and the factor 2 is absorbed by the output
projection. Pooling kernel = stride (the paper also tries overlapping kernels); keys and values
of the second level are the pooled first-level ones (the linear projections commute with mean
pooling). Level 2 is computed block-banded: queries in groups of ``s``, each against the
``2R + 1`` pooled groups around it (``R = ceil(pool_window / s)``), so memory grows with
``L * pool_window / s``, never ``L^2``.

Accepts rotary positions only: a pooled key has no single distance to a query, so a score bias or
relative vectors have nothing to be indexed by. No memory keys (groups are of the segment).
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from torch import nn

import kernels

from ..capabilities import ROTARY, AttentionCaps
from ..errors import ConfigError
from ..variant import Param, Variant
from .common import NEG
from .layout import pattern_mask
from .patterns import WINDOW
from .sparse import pattern_block_mask

# the pooled band and the pooling group size (pool_window / pool_stride is capped in the check)
POOL_WINDOW = Param("pool_window", int, 256, range=(1, 1 << 20), cap=8192)
POOL_STRIDE = Param("pool_stride", int, 4, range=(1, 1 << 16), cap=64)


MAX_BAND = 1024  # pooled groups on each side of a query: the band is L x (2 * MAX_BAND + 1) scores per head


def mean_pool_groups(x, s: int):
    """``(B, h, L, d) -> (B, h, ceil(L / s), d)``: mean over consecutive groups of ``s`` (last may be short)."""
    B, h, L, d = x.shape
    G = -(-L // s)
    pad = G * s - L
    sums = F.pad(x, (0, 0, 0, pad)).view(B, h, G, s, d).sum(3)  # (B, h, G, d)
    sizes = torch.full((G,), float(s), device=x.device, dtype=x.dtype)
    sizes[-1] = s - pad
    return sums / sizes[:, None]


def group_allowed(i, g, L: int, s: int, pool_window: int, causal: bool):
    """Query ``i`` may attend group ``g`` (broadcast tensors): the whole group inside its window."""
    start, end = g * s, torch.clamp((g + 1) * s, max=L) - 1
    ok = (g >= 0) & (start < L) & (i - start < pool_window)
    return ok & (end <= i) if causal else ok & (end - i < pool_window)


class PoolingformerAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        dh = cfg.d_head
        w = torch.empty(cfg.n_heads, dh, dh)
        bound = math.sqrt(6.0 / (2 * dh))  # Xavier-uniform of a d_h x d_h map, like the projections
        self.w_q2 = nn.Parameter(w.uniform_(-bound, bound))
        self.level1 = SimpleNamespace(attention="sliding_window", window=cfg.window, causal=bool(cfg.causal))

    def forward(self, q, k, v, mods, ctx):
        cfg = self.cfg
        B, h, L, dh = q.shape
        s, scale = cfg.pool_stride, 1.0 / math.sqrt(dh)
        if ctx.need_weights:
            mask = pattern_mask(self.level1, L).to(q.device)
            y, p1 = kernels.attention_ref(q, k, v, mask=mask, softcap=cfg.softcap)
        else:
            bm = pattern_block_mask(self.level1, L).to(q.device)
            y, p1 = kernels.attention(q, k, v, block_mask=bm, softcap=cfg.softcap), None
        rep = h // k.shape[1]
        kbar = mean_pool_groups(k.repeat_interleave(rep, 1), s)  # (B, h, G, d_h): query head n reads K/V head n // rep
        vbar = mean_pool_groups(v.repeat_interleave(rep, 1), s)
        q2 = torch.einsum("bhld,hde->bhle", y, self.w_q2)  # (B, h, L, d_h)
        z, p, allowed = self._level2(q2, kbar, vbar, L, scale)
        has = allowed.any(-1).reshape(-1)[:L].view(1, 1, L, 1)  # a complete group in the query's window
        out = torch.where(has, (y + z) / 2, y)
        probs = None
        if ctx.need_weights:  # effective attention over the L keys: (P1 + P2 M) / 2, or P1
            G = kbar.shape[2]
            member = torch.arange(L, device=q.device) // s  # (L,) group of each key
            sizes = torch.bincount(member, minlength=G).to(p.dtype)
            p2 = self._dense(p, G, L)  # (B, h, L, G)
            spread = (p2 / sizes)[..., member]  # (B, h, L, L): a group's weight shared by its keys
            probs = torch.where(has, (p1 + spread) / 2, p1)
        return out, probs, {}

    def _level2(self, q2, kbar, vbar, L: int, scale: float):
        """Banded pooled attention: ``z (B, h, L, d_h)``, the band weights ``p (B, h, G, s, 2R+1)``
        (zero where not allowed) and ``allowed (G, s, 2R+1)``."""
        cfg = self.cfg
        B, h, _, dh = q2.shape
        s, G = cfg.pool_stride, kbar.shape[2]
        R = min(-(-cfg.pool_window // s), G)  # groups a window reaches on each side (at most all of them)
        W = 2 * R + 1
        qb = F.pad(q2, (0, 0, 0, G * s - L)).view(B, h, G, s, dh)  # (B, h, G, s, d_h): queries of group b
        kb = F.pad(kbar, (0, 0, R, R)).unfold(2, W, 1)  # (B, h, G, d_h, W): groups b - R .. b + R
        vb = F.pad(vbar, (0, 0, R, R)).unfold(2, W, 1)
        i = torch.arange(G * s, device=q2.device).view(G, s, 1)  # query positions
        g = torch.arange(G, device=q2.device).view(G, 1, 1) - R + torch.arange(W, device=q2.device)  # (G, 1, W)
        allowed = group_allowed(i, g, L, s, cfg.pool_window, bool(cfg.causal)) & (i < L)  # (G, s, W)
        scores = torch.einsum("bhgsd,bhgdw->bhgsw", qb, kb) * scale
        # a finite fill, then zeroed: a query with no allowed group gets z = 0 and finite gradients
        p = torch.softmax(scores.masked_fill(~allowed, NEG), dim=-1) * allowed
        z = torch.einsum("bhgsw,bhgdw->bhgsd", p, vb).reshape(B, h, G * s, dh)[:, :, :L]
        return z, p, allowed

    def _dense(self, p, G: int, L: int):
        """Band weights ``(B, h, G, s, 2R+1)`` -> ``(B, h, L, G)`` at their group columns (display only)."""
        B, h, _, s, W = p.shape
        R = (W - 1) // 2
        cols = (torch.arange(G, device=p.device)[:, None] + torch.arange(W, device=p.device)).view(G, 1, W)
        dense = p.new_zeros(B, h, G, s, G + 2 * R).scatter(-1, cols.expand(B, h, G, s, W), p)
        return dense.reshape(B, h, G * s, G + 2 * R)[:, :, :L, R : R + G]


def check_poolingformer(cfg):
    if cfg.pool_window <= cfg.window:
        raise ConfigError(
            "pool_window",
            cfg.pool_window,
            f"an integer > window={cfg.window}: the second level widens the first level's receptive field",
        )
    if -(-cfg.pool_window // cfg.pool_stride) > MAX_BAND:
        raise ConfigError(
            "pool_window",
            cfg.pool_window,
            f"at most {MAX_BAND} * pool_stride={MAX_BAND * cfg.pool_stride}: each query scores the "
            "pooled groups of its window, ceil(pool_window / pool_stride) on each side",
        )
    if cfg.pool_stride > cfg.pool_window:
        raise ConfigError(
            "pool_stride",
            cfg.pool_stride,
            f"an integer in [1, pool_window={cfg.pool_window}]: a group must fit in the pooling window",
        )


CAPS = AttentionCaps(
    accepts=frozenset({ROTARY}),
    memory_keys=False,
    refuses_because="pools keys into groups, and a pooled key has no single distance to a query for a "
    "score bias or relative vectors to be indexed by",
)

VARIANTS = (
    Variant(
        "poolingformer",
        "Zhang et al. 2021 (Poolingformer)",
        "Two levels: a sliding window, then the window's output queries mean-pooled keys/values of a larger window.",
        build=PoolingformerAttention,
        params=(WINDOW, POOL_WINDOW, POOL_STRIDE),
        check=check_poolingformer,
        caps=CAPS,
        n_params=lambda c: c.n_heads * c.d_head**2,
    ),
)
