"""Clipped relative key / value vectors: ``shaw`` (Shaw et al. 2018, "Self-Attention with Relative
Position Representations").

Each layer learns two tables of ``2 max_relative + 1`` vectors of width ``d_h`` (shared by the
heads), one added to the keys and one to the values of every (query, key) pair by their clipped
distance ``clip(j - i, -max_relative, max_relative)``; ``kernels.attention`` applies them as
``rel_k`` / ``rel_v``.
"""

from __future__ import annotations

import torch
from torch import nn

from ..capabilities import RELATIVE_KV, PositionCaps
from ..variant import Param, Variant
from .base import INIT_STD, NoPosition

MAX_RELATIVE = Param("max_relative", int, 16, range=(1, 4096), cap=1024)  # rows of a learned table


class Shaw(NoPosition):
    """Clipped relative key/value vectors, width d_h, shared by heads, one pair of tables per layer."""

    def __init__(self, cfg):
        super().__init__(cfg)
        rows = 2 * cfg.max_relative + 1  # rel in [-max_relative, max_relative]
        self.rel_k = nn.ParameterList(
            [nn.Parameter(torch.randn(1, rows, cfg.d_head) * INIT_STD) for _ in range(cfg.n_layers)]
        )
        self.rel_v = nn.ParameterList(
            [nn.Parameter(torch.randn(1, rows, cfg.d_head) * INIT_STD) for _ in range(cfg.n_layers)]
        )

    def modify(self, q, k, layer, k_start=0, scale=None):
        # the kernel's clipped index with R = 2*max_relative+1 rows is exactly clip(j-i) + max_relative
        return q, k, {"rel_k": self.rel_k[layer], "rel_v": self.rel_v[layer]}


VARIANTS = (
    Variant(
        "shaw",
        "Shaw et al. 2018",
        "Learned vectors for each clipped distance j - i added to keys and values inside attention.",
        build=Shaw,
        params=(MAX_RELATIVE,),
        caps=PositionCaps(produces=frozenset({RELATIVE_KV}), relative=True),
        n_params=lambda c: 2 * c.n_layers * (2 * c.max_relative + 1) * c.d_head,
    ),
)
