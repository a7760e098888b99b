"""Absolute position tables added to the token embeddings: ``sinusoidal`` and ``learned``.

- ``sinusoidal``: Vaswani et al. 2017, "Attention Is All You Need": ``PE[p, 2k] = sin(p /
  10000^(2k/d))``, ``PE[p, 2k+1] = cos(...)``, computed in float64 and added in the activations'
  dtype (``sinusoid`` is also the timing signal of the Universal Transformer and the relative
  sinusoids of Transformer-XL).
- ``learned``: Gehring et al. 2017, "Convolutional Sequence to Sequence Learning": one learned
  vector per position ``0 .. max_len - 1``; a longer input is refused with the fix.
"""

from __future__ import annotations

import torch
from torch import nn

from ..capabilities import PositionCaps
from ..errors import ConfigError
from ..variant import Variant
from .base import INIT_STD, NoPosition


def sinusoid(positions: torch.Tensor, dim: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """``PE[p, 2k] = sin(p / 10000^(2k/dim))``, ``PE[p, 2k+1] = cos(...)`` for float ``positions``.

    Computed in float64 and returned in ``dtype`` (float32 by default; a float64 model asks for
    float64, so its table is not rounded through float32)."""
    pos = positions.to(torch.float64)[:, None]
    two_k = torch.arange(0, dim, 2, dtype=torch.float64, device=positions.device)
    angle = pos / torch.pow(10000.0, two_k / dim)  # (P, ceil(dim/2))
    pe = torch.empty(positions.shape[0], dim, dtype=torch.float64, device=positions.device)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle[:, : dim // 2])  # odd dim: the last sin column has no cos partner
    return pe.to(dtype)


def table_dtype(dtype: torch.dtype) -> torch.dtype:
    """float64 for float64 activations, else the activations' own dtype (added in it anyway)."""
    return dtype if dtype.is_floating_point else torch.float32


def sinusoidal_table(length: int, dim: int) -> torch.Tensor:
    """The Vaswani 2017 table ``[length, dim]`` (float32); ``dim`` may be odd."""
    return sinusoid(torch.arange(length), dim)


class Sinusoidal(NoPosition):
    def __init__(self, cfg):
        super().__init__(cfg)
        self.d_model = cfg.d_model

    def embed(self, x, pos):
        return x + sinusoid(pos, self.d_model, table_dtype(x.dtype))  # (L, d) broadcast over B


class Learned(NoPosition):
    def __init__(self, cfg):
        super().__init__(cfg)
        self.max_len = cfg.max_len
        self.table = nn.Embedding(cfg.max_len, cfg.d_model)
        nn.init.normal_(self.table.weight, std=INIT_STD)

    def embed(self, x, pos):
        last = int(pos.max()) if pos.numel() else -1
        if last >= self.max_len:
            raise ConfigError(
                "max_len",
                self.max_len,
                f"the learned position table has max_len={self.max_len} rows (positions 0..{self.max_len - 1}) "
                f"but the input needs position {last} (sequence length L={x.shape[1]}); "
                f"set max_len >= {last + 1}, shorten the input, or use a relative position encoding",
            )
        return x + self.table(pos).to(x.dtype)


ABSOLUTE = PositionCaps(absolute=True)

VARIANTS = (
    Variant(
        "sinusoidal",
        "Vaswani et al. 2017",
        "Fixed sine/cosine waves of geometric wavelengths added to the token embeddings.",
        build=Sinusoidal,
        caps=ABSOLUTE,
    ),
    Variant(
        "learned",
        "Gehring et al. 2017",
        "A learned vector per absolute position added to the token embeddings; cannot go past max_len.",
        build=Learned,
        params=("max_len",),
        caps=ABSOLUTE,
        n_params=lambda c: c.max_len * c.d_model,
    ),
)
