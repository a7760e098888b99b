"""Attention registry (docs/catalogue.md sections 1-2) and the public ``pattern_mask``.

One ``Variant`` per key; ``build(cfg)`` returns the attention *core*: an ``nn.Module`` with
``forward(q, k, v, mods, ctx) -> (out [B, h, Lq, d_h], probs [B, h, Lq, Lk] or None, aux dict)``,
called after the Q/K/V projections and the position modifier (``mods`` are the
``kernels.attention`` keyword arguments the position encoding produced).

The section-1 records come from ``patterns.PATTERNS`` (one ``Pattern`` each, all run by
``PatternAttention``); each section-2 module exports its ``VARIANTS``. This package imports its
modules and none of them imports it back.
"""
from __future__ import annotations

from ..capabilities import KINDS, AttentionCaps
from ..variant import Variant, register
from . import adaptive_span, linear, lowrank, lsh, routing
from . import axial, clustered, probsparse, sinkhorn, synthesizer  # issue 11 part 1
from . import induced, lite, residual, talking_heads  # issue 11 part 2
from . import poolingformer  # issue 11: Zhang et al. 2021
from .layout import full_rule, pattern_mask
from .patterns import PARAMS, PATTERNS, RULES, Pattern
from .sparse import PatternAttention, pattern_block_mask

ATTENTION: dict = {}

# Softmax over a fixed pattern: every score modifier, and memory keys before the segment.
PATTERN_CAPS = AttentionCaps(accepts=KINDS)  # every modifier reaches kernels.attention

for _p in PATTERNS.values():
    register(ATTENTION, Variant(_p.key, _p.paper, _p.summary, build=PatternAttention,
                                params=tuple(f for f in _p.params if f != "seed"), check=_p.check,
                                caps=PATTERN_CAPS))
for _module in (lsh, routing, linear, lowrank, adaptive_span, axial, clustered, probsparse, sinkhorn, synthesizer,
                talking_heads, residual, induced, lite, poolingformer):
    for _v in _module.VARIANTS:
        register(ATTENTION, _v)

__all__ = ["ATTENTION", "PATTERNS", "Pattern", "RULES", "PARAMS", "pattern_mask", "pattern_block_mask",
           "full_rule", "PatternAttention", "PATTERN_CAPS"]
