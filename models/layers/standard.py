"""The standard layer structure (Vaswani et al. 2017): ``n_layers`` independent blocks, each an
attention sublayer then an FFN sublayer, with the configured norm placement.

It is the structure an ``Interventions`` record (``models/interventions.py``) is defined on: with one
in the forward context, the residual stream entering each block (and leaving the last) may be
replaced, and with ``cache=True`` each block's ``LayerInfo.output`` keeps the stream leaving it."""

from __future__ import annotations

from ..blocks import Block
from ..variant import Variant
from .stack import BlockStack, stack_params


class StandardStack(BlockStack):
    """``n_layers`` independent blocks, each an attention sublayer then an FFN sublayer."""

    def __init__(self, cfg):
        super().__init__(Block(cfg, i) for i in range(cfg.n_layers))

    def forward(self, x, ctx):
        iv = ctx.interventions
        if iv is None:
            return super().forward(x, ctx)
        for block in self.blocks:
            x = iv.at_resid(block.layer, x)
            info = ctx.begin_layer(x)
            x = block(x, ctx, info)
            if iv.cache:
                info.output = x
        return iv.at_resid(len(self.blocks), x)


VARIANTS = (
    Variant(
        "standard",
        "Vaswani et al. 2017",
        "A stack of independent blocks: attention sublayer, then feed-forward sublayer.",
        build=StandardStack,
        n_params=stack_params,
    ),
)
