"""The position-encoding interface, and the ``none`` choice (NoPE, Kazemnejad et al. 2023).

``NoPosition`` is the base class of every encoding: ``embed(x, pos)`` returns ``x`` and
``modify(q, k, ...)`` changes nothing. ``none`` is the base class itself: no position information,
so only a causal mask lets the model tell token order. ``relative_range`` and ``INIT_STD`` are
shared by the relative encodings.
"""

from __future__ import annotations

import torch
from torch import nn

from ..capabilities import PositionCaps
from ..errors import ConfigError
from ..variant import Variant

INIT_STD = 0.02  # small normal init of learned tables (GPT-2 / T5-style)


def relative_range(lk: int, device=None) -> torch.Tensor:
    """``rel = j - i`` for rows ``0 .. 2Lk - 2`` of a relative table (row ``rel + Lk - 1``)."""
    return torch.arange(-(lk - 1), lk, device=device)


class NoPosition(nn.Module):
    """Base class: no absolute term, no attention modification."""

    def __init__(self, cfg):
        super().__init__()

    def embed(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        return x

    def modify(self, q, k, layer: int, k_start: int = 0, scale=None):
        return q, k, {}


def check_none(cfg) -> None:
    if not cfg.causal:
        raise ConfigError(
            "position",
            "none",
            "only meaningful with causal=True: a bidirectional model without positions is "
            "permutation-equivariant and cannot tell token order; choose another position or set causal=True",
        )


VARIANTS = (
    Variant(
        "none",
        "Kazemnejad et al. 2023 (NoPE)",
        "No position information: a causal model can still infer order from the causal mask.",
        build=NoPosition,
        params=("causal",),
        check=check_none,
        caps=PositionCaps(),
    ),
)
