"""Attention registry (CATALOGUE.md sections 1-2) and the public ``pattern_mask``.

One ``Variant`` per key; ``build(cfg)`` returns the attention *core*: an ``nn.Module`` with
``forward(q, k, v, mods, ctx) -> (out [B, h, Lq, d_h], probs [B, h, Lq, Lk] or None, aux dict)``,
called after the Q/K/V projections and the position modifier (``mods`` are the
``kernels.attention`` keyword arguments the position encoding produced).
"""
from __future__ import annotations

from ..registry import Variant, register
from .patterns import PARAMS, RULES, pattern_mask
from .sparse import PatternAttention, pattern_block_mask

ATTENTION: dict = {}

_PATTERNS = {
    "full": ("Vaswani et al. 2017", "Every query attends every key: the quadratic baseline."),
    "sliding_window": ("Beltagy et al. 2020 (Longformer); Mistral 2023",
                       "Each query sees a band of `window` keys around it (causal: itself and the previous window-1)."),
    "dilated_window": ("Beltagy et al. 2020 (Longformer, dilated)",
                       "A band with gaps: every dilation-th key up to window*dilation away, widening the receptive field at the same cost."),
    "strided": ("Child et al. 2019 (Sparse Transformer, strided)",
                "The previous `stride` keys plus every stride-th key: two hops connect any pair."),
    "fixed": ("Child et al. 2019 (Sparse Transformer, fixed)",
              "Attend within your block of `stride` plus the last n_summary 'summary' positions of every block."),
    "block_local": ("Parmar et al. 2018 (Image Transformer); Qiu et al. 2019 (Blockwise)",
                    "The sequence is cut into blocks of `block_size`; each query attends only its own block."),
    "longformer": ("Beltagy et al. 2020 (Longformer); Ainslie et al. 2020 (ETC)",
                   "A sliding window plus n_global global tokens that see and are seen by every position."),
    "bigbird": ("Zaheer et al. 2020 (BigBird)",
                "Window + global tokens + n_random random key blocks per query block: sparse yet a universal approximator."),
}

for _key, (_paper, _summary) in _PATTERNS.items():
    register(ATTENTION, Variant(_key, _paper, _summary, build=PatternAttention,
                                params=tuple(p for p in PARAMS[_key] if p != "seed")))

__all__ = ["ATTENTION", "RULES", "pattern_mask", "pattern_block_mask", "PatternAttention"]

# Section 2 mechanisms register themselves into ATTENTION on import (after ATTENTION exists).
from . import lsh, routing, linear, lowrank, adaptive_span  # noqa: E402,F401
