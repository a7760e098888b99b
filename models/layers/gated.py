"""Gated layers: GTrXL (Parisotto et al. 2020, "Stabilizing Transformers for Reinforcement Learning").

Two changes to each block (the paper's Figure 1, right):
- identity-map reordering: the norm (``cfg.norm``) is applied to the sublayer *input* and a ReLU to
  the sublayer *output*, so there is a path from the block's input to its output with no norm;
- a GRU-type gate replaces each residual addition ``x + y``::

      r = sigmoid(W_r y + U_r x)
      z = sigmoid(W_z y + U_z x - b_g)
      h = tanh(W_g y + U_g (r * x))
      g(x, y) = (1 - z) * x + z * h

  with ``b_g`` initialised to 2, so ``z`` starts near ``sigmoid(-2) = 0.12``: each block starts
  close to the identity (the paper's key to stable early training).

The reordering is a pre-norm placement (plus the final norm before the head), so only
``norm_placement = "pre"`` is accepted; the others would contradict it. Reported per layer:
``info.gate_attn`` / ``info.gate_ffn`` ``(B, L)``: mean update gate ``z`` per token.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..blocks import Attention
from ..dropout import Dropout
from ..errors import ConfigError
from ..ffn import FFN
from ..norms import NORM
from ..variant import Variant
from .stack import BlockStack

GATE_BIAS_INIT = 2.0


class GRUGate(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.w = nn.Linear(d, 3 * d, bias=False)  # W_r, W_z, W_g applied to the sublayer output y
        self.u = nn.Linear(d, 2 * d, bias=False)  # U_r, U_z applied to the stream x
        self.u_g = nn.Linear(d, d, bias=False)  # U_g applied to r * x
        self.b_g = nn.Parameter(torch.full((d,), GATE_BIAS_INIT))

    def forward(self, x, y):
        wr, wz, wg = self.w(y).chunk(3, dim=-1)
        ur, uz = self.u(x).chunk(2, dim=-1)
        r = torch.sigmoid(wr + ur)
        z = torch.sigmoid(wz + uz - self.b_g)
        h = torch.tanh(wg + self.u_g(r * x))
        return (1 - z) * x + z * h, z


class GatedBlock(nn.Module):
    def __init__(self, cfg, layer: int):
        super().__init__()
        self.layer = layer
        self.attn = Attention(cfg, layer)
        self.norm_attn = NORM[cfg.norm].build(cfg.d_model, cfg)
        self.gate_attn = GRUGate(cfg.d_model)
        ffn = FFN[cfg.ffn].build
        self.ffn = ffn(cfg) if ffn is not None else None
        if self.ffn is not None:
            self.norm_ffn = NORM[cfg.norm].build(cfg.d_model, cfg)
            self.gate_ffn = GRUGate(cfg.d_model)
        self.drop = Dropout(cfg.dropout)

    def forward(self, x, ctx, info):
        y = F.relu(self.drop(self.attn(self.norm_attn(x), ctx, info)))
        x, z = self.gate_attn(x, y)
        info.gate_attn = z.mean(-1).detach()
        if self.ffn is not None:
            y, aux = self.ffn(self.norm_ffn(x), ctx.tokens)
            info.record_ffn(aux)
            x, z = self.gate_ffn(x, F.relu(self.drop(y)))
            info.gate_ffn = z.mean(-1).detach()
        return x


class GatedStack(BlockStack):
    def __init__(self, cfg):
        super().__init__(GatedBlock(cfg, i) for i in range(cfg.n_layers))


def check_gated(cfg):
    if cfg.norm_placement != "pre":
        raise ConfigError(
            "norm_placement",
            cfg.norm_placement,
            "'pre' with layer='gated': GTrXL's identity-map reordering normalises each sublayer's input "
            "and replaces the residual addition by a gate, which is a pre-norm placement by construction",
        )


def gated_params(cfg, parts: dict) -> int:
    """Per layer: attention + norm + gate, and FFN + norm + gate when there is an FFN."""
    d = cfg.d_model
    gate = 6 * d * d + d  # W (3d x d), U (2d x d), U_g (d x d), b_g
    block = parts["attn"] + parts["norm"] + gate
    if parts["ffn"] is not None:
        block += parts["ffn"] + parts["norm"] + gate
    return cfg.n_layers * block


VARIANTS = (
    Variant(
        "gated",
        "Parisotto et al. 2020 (GTrXL)",
        "GRU-type gates replace the residual additions, biased toward the identity at initialisation.",
        build=GatedStack,
        params=("norm",),
        check=check_gated,
        n_params=gated_params,
    ),
)
