"""Layer structures (CATALOGUE.md section 8): how blocks are stacked.

``build(cfg)`` returns an ``nn.Module`` with ``forward(x, ctx) -> x`` that appends one info dict
per applied layer to ``ctx.layers`` (with ``"input"``: the hidden states entering that layer).
"""
from __future__ import annotations

from torch import nn

from .blocks import Block
from .registry import Variant, register

LAYER: dict = {}


class StandardStack(nn.Module):
    """``n_layers`` independent blocks, each an attention sublayer then an FFN sublayer."""

    def __init__(self, cfg):
        super().__init__()
        self.blocks = nn.ModuleList(Block(cfg, i) for i in range(cfg.n_layers))

    def forward(self, x, ctx):
        for block in self.blocks:
            info = {"input": x}
            ctx.layers.append(info)
            x = block(x, ctx, info)
        return x


register(LAYER, Variant("standard", "Vaswani et al. 2017",
                        "A stack of independent blocks: attention sublayer, then feed-forward sublayer.",
                        build=StandardStack))
