"""Attention with linear biases: ``alibi`` (Press et al. 2022, "Train Short, Test Long").

A fixed per-head slope times the distance is subtracted from the scores (``alibi_slopes``, applied
by ``kernels.attention``); nothing is learned.
"""

from __future__ import annotations

import torch

from ..capabilities import SCORE_BIAS, PositionCaps
from ..variant import Variant
from .base import NoPosition


def alibi_slopes(n_heads: int) -> torch.Tensor:
    """ALiBi head slopes ``[n_heads]`` (Press 2022, reference / BLOOM rule for any ``n_heads``).

    ``n`` a power of two: ``m_h = 2^(-8h/n)``, ``h = 1..n``. Otherwise the largest power of two
    ``n' < n`` gives its ``n'`` slopes and the other heads take the ``2n'``-head slopes at 0-based
    indices 0, 2, 4, ...
    """
    if n_heads < 1:
        raise ValueError(f"n_heads must be >= 1, got {n_heads}")

    def power_of_two(n: int) -> list:
        return [2.0 ** (-8.0 * h / n) for h in range(1, n + 1)]

    n_pow = 1 << (n_heads.bit_length() - 1)  # largest power of two <= n_heads
    slopes = power_of_two(n_pow)
    if n_pow != n_heads:
        slopes += power_of_two(2 * n_pow)[0::2][: n_heads - n_pow]
    return torch.tensor(slopes, dtype=torch.float32)


class Alibi(NoPosition):
    def __init__(self, cfg):
        super().__init__(cfg)
        self.register_buffer("slopes", alibi_slopes(cfg.n_heads), persistent=False)  # fixed, not learned

    def modify(self, q, k, layer, k_start=0, scale=None):
        return q, k, {"alibi_slopes": self.slopes}


VARIANTS = (
    Variant(
        "alibi",
        "Press et al. 2022 (ALiBi)",
        "Subtracts a fixed per-head slope times the distance from the scores; no learned parameters.",
        build=Alibi,
        caps=PositionCaps(produces=frozenset({SCORE_BIAS}), relative=True),
    ),
)
