"""What every stack of blocks shares: run the blocks in order, one ``LayerInfo`` each, the
parameter count of a stack of standard blocks, and the weight initialisation of a whole model.

A layer structure whose blocks take ``(x, ctx, info)`` and keep their attention in ``.attn`` is a
``BlockStack`` of those blocks (standard, gated, macaron, the encoder-decoder's decoder); structures
that interleave or repeat blocks differently (reversible, universal, funnel, ...) have their own
``forward``.
"""

from __future__ import annotations

from torch import nn


class BlockStack(nn.Module):
    """``blocks`` applied in order; layer ``i`` gets the ``LayerInfo`` that ``ctx.begin_layer`` opens."""

    def __init__(self, blocks):
        super().__init__()
        self.blocks = nn.ModuleList(blocks)

    def forward(self, x, ctx):
        for block in self.blocks:
            x = block(x, ctx, ctx.begin_layer(x))
        return x

    def attention(self, index: int):
        """The ``Attention`` module that layer ``index`` runs."""
        return self.blocks[index].attn


def block_params(parts: dict) -> int:
    """One block: attention + its residual wrapper, FFN + its wrapper (when there is one).

    ``parts`` (from ``ModelConfig.approx_params``): ``attn`` (projections + core), ``ffn`` (None
    without an FFN), ``norm`` (one norm), ``residual`` (one placement wrapper), ``attn_of(cfg)`` (the ``attn`` of
    another config)."""
    block = parts["attn"] + parts["residual"]
    if parts["ffn"] is not None:
        block += parts["ffn"] + parts["residual"]
    return block


def stack_params(cfg, parts: dict) -> int:
    """``n_layers`` blocks of ``block_params``: the ``n_params`` of every structure made of standard blocks."""
    return cfg.n_layers * block_params(parts)


def init_weights(model: nn.Module, embed: nn.Embedding) -> None:
    """Xavier-uniform projections with zero biases (the 2017 paper), N(0, 0.02) token embedding."""
    for m in model.modules():
        if isinstance(m, nn.Linear):
            nn.init.xavier_uniform_(m.weight)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
    nn.init.normal_(embed.weight, std=0.02)
