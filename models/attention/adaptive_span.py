"""Adaptive attention span: Sukhbaatar, Grave, Bojanowski & Joulin 2019, "Adaptive Attention Span
in Transformers" (causal only).

Each head ``n`` learns a span ``z_n in [0, max_span]``; the causal softmax weights are multiplied by
the soft mask ``m_z(x) = clamp((R + z - x) / R, 0, 1)`` of the distance ``x = i - j``
(``R = span_ramp``) and renormalised, as in the paper's code. Because ``m`` depends only on ``x``,
``p_ij m_ij / sum_j p_ij m_ij = softmax_j(s_ij + log m_ij)``: the mask is a per-head relative score
bias ``log m_z(x)`` (``-1e9`` where ``m = 0``, so those weights are exactly 0), added to whatever
bias the position encoding brings and run through ``kernels.attention``. Keys beyond the largest
current span are skipped block-sparsely (a causal sliding-window layout of
``ceil((R + max z) / 64) * 64`` keys), so cost shrinks with the learned spans.

``z`` is stored directly (initialised to ``max_span``: the span starts open and the penalty closes
it). The forward uses ``clamp(z, 0, max_span)`` with a straight-through gradient (value clamped,
gradient of the identity): the paper clamps the parameter after every optimiser step, which a
module cannot do without mutating a parameter inside a forward that may run several times per step
(universal layers, memory passes); straight-through keeps the same values and never leaves a
parameter that stepped past a bound with a zero gradient.

Auxiliary loss (per layer, summed over layers by the model): ``aux["loss"] = SPAN_PENALTY *
mean_n z_n`` with ``SPAN_PENALTY = 2e-6``, the paper's ``lambda / M sum_i z_i`` with its
``lambda = 2e-6``. ``aux["span"]`` is the current ``z`` per head.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import torch
from torch import nn

import kernels

from ..capabilities import KINDS, AttentionCaps
from ..variant import Param, Variant
from .common import NEG
from .sparse import BLOCK, pattern_block_mask

MAX_SPAN = Param("max_span", int, 64, range=(1, 1 << 16), cap=16384)
SPAN_RAMP = Param("span_ramp", int, 16, range=(1, 1 << 16), cap=1024)

SPAN_PENALTY = 2e-6


def span_mask(z: torch.Tensor, dist: torch.Tensor, ramp: int) -> torch.Tensor:
    """``m_z(x) = clamp((R + z - x) / R, 0, 1)``: ``z [h]``, ``dist [N]`` -> ``[h, N]``."""
    return ((ramp + z[:, None] - dist[None, :].to(z.dtype)) / ramp).clamp(0.0, 1.0)


class AdaptiveSpanAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.z = nn.Parameter(torch.full((cfg.n_heads,), float(cfg.max_span)))

    def span(self) -> torch.Tensor:
        """``z`` clamped to ``[0, max_span]``, straight-through gradient."""
        z = self.z
        return z + (z.clamp(0.0, float(self.cfg.max_span)) - z).detach()

    def forward(self, q, k, v, mods, ctx):
        cfg = self.cfg
        lq, lk = q.shape[2], k.shape[2]
        z = self.span()
        dist = -torch.arange(-(lk - 1), lk, device=q.device)  # x = i - j for rel_bias row rel + Lk - 1
        m = span_mask(z.float(), dist, cfg.span_ramp)  # (h, 2Lk - 1)
        log_m = torch.where(m > 0, torch.log(m.clamp_min(1e-30)), NEG)
        mods = dict(mods)
        rel_bias = mods.pop("rel_bias", None)
        rel_bias = log_m if rel_bias is None else rel_bias.float() + log_m
        aux = {"loss": SPAN_PENALTY * z.mean(), "span": z.detach()}
        if ctx.need_weights:
            out, probs = kernels.attention_ref(q, k, v, causal=True, softcap=cfg.softcap, rel_bias=rel_bias, **mods)
            return out, probs, aux
        window = math.ceil((cfg.span_ramp + float(z.detach().max())) / BLOCK) * BLOCK  # keys with m > 0 all inside
        bm = None
        if window < lk:
            layout = SimpleNamespace(attention="sliding_window", window=window, causal=True)
            bm = pattern_block_mask(layout, lq, lk - lq).to(q.device)
        out = kernels.attention(q, k, v, causal=True, block_mask=bm, softcap=cfg.softcap, rel_bias=rel_bias, **mods)
        return out, None, aux


# every score modifier (the span mask is one more bias); memory was never wired for it
CAPS = AttentionCaps(
    accepts=KINDS,
    memory_keys=False,
    causal_modes=frozenset({True}),
    causal_reason=("it masks by the distance i - j to *earlier* keys (a causal language-model mechanism)"),
)

VARIANTS = (
    Variant(
        "adaptive_span",
        "Sukhbaatar et al. 2019 (Adaptive Attention Span)",
        "Each head learns how far back it looks: a soft ramp mask of learned span z, kept short by an L1 penalty.",
        build=AdaptiveSpanAttention,
        params=(MAX_SPAN, SPAN_RAMP),
        caps=CAPS,
        n_params=lambda c: c.n_heads,
    ),
)
