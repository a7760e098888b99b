"""Attention registry (docs/catalogue.md sections 1-2) and the public ``pattern_mask``.

One ``Variant`` per key; ``build(cfg)`` returns the attention *core*: an ``nn.Module`` with
``forward(q, k, v, mods, ctx) -> (out [B, h, Lq, d_h], probs [B, h, Lq, Lk] or None, aux dict)``,
called after the Q/K/V projections (``models.qkv``) and the position modifier (``mods`` are the
``kernels.attention`` keyword arguments the position encoding produced).

The section-1 records come from ``patterns.PATTERNS`` (one ``Pattern`` each, all run by
``PatternAttention``); each section-2 module ends with its ``VARIANTS``, and ``ATTENTION`` gathers
them in dropdown order. This package imports its modules and none of them imports it back.
"""

from __future__ import annotations

from ..capabilities import KINDS, LEARNED_SINK, AttentionCaps
from ..variant import Variant, gather
from . import (
    adaptive_span,
    axial,
    clustered,
    differential,
    gated_deltanet,
    induced,
    linear,
    lite,
    lowrank,
    lsh,
    mamba2,
    mla,
    nsa,
    poolingformer,
    probsparse,
    residual,
    routing,
    sinkhorn,
    synthesizer,
    talking_heads,
)
from .layout import full_rule, pattern_mask
from .patterns import PARAMS, PATTERNS, RULES, Pattern
from .sparse import PatternAttention, pattern_block_mask

# Softmax over a fixed pattern: every score modifier, learned sinks, and memory keys before the segment.
PATTERN_CAPS = AttentionCaps(accepts=KINDS | {LEARNED_SINK})  # every modifier reaches kernels.attention


def _pattern_variant(p: Pattern) -> Variant:
    """The attention record of a pattern: its fields (the seed is a core field, always shown) and check."""
    records = {r.name: r for r in p.param_records}
    return Variant(
        p.key,
        p.paper,
        p.summary,
        build=PatternAttention,
        params=tuple(records.get(n, n) for n in p.params if n != "seed"),
        check=p.check,
        caps=PATTERN_CAPS,
        surgery=True,
    )


ATTENTION = gather(
    tuple(_pattern_variant(p) for p in PATTERNS.values()),
    lsh.VARIANTS,
    routing.VARIANTS,
    linear.VARIANTS,
    lowrank.VARIANTS,
    adaptive_span.VARIANTS,
    axial.VARIANTS,
    clustered.VARIANTS,
    probsparse.VARIANTS,
    sinkhorn.VARIANTS,
    synthesizer.VARIANTS,
    talking_heads.VARIANTS,
    residual.VARIANTS,
    induced.VARIANTS,
    lite.VARIANTS,
    poolingformer.VARIANTS,
    mla.VARIANTS,
    differential.VARIANTS,
    nsa.VARIANTS,
    mamba2.VARIANTS,
    gated_deltanet.VARIANTS,
)

__all__ = [
    "ATTENTION",
    "PATTERNS",
    "Pattern",
    "RULES",
    "PARAMS",
    "pattern_mask",
    "pattern_block_mask",
    "full_rule",
    "PatternAttention",
    "PATTERN_CAPS",
]
