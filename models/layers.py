"""Layer structures (CATALOGUE.md section 8): how blocks are stacked.

``build(cfg)`` returns an ``nn.Module`` with ``forward(x, ctx) -> x`` that opens one info dict per
applied layer with ``ctx.begin_layer(x)`` (``"input"``: the hidden states entering that layer,
``"index"``: its position in the stack) and ``attention(index)``: the ``Attention`` module that
layer ``index`` runs (the compressive memory trains its compression against it).

- ``standard``: independent blocks (Vaswani et al. 2017), below.
- ``reversible``: Reformer / RevNet, ``layers_reversible.py``.
- ``universal``: Universal Transformer with optional ACT, ``layers_universal.py``.
- ``gated``: GTrXL gating, ``layers_gated.py``.
- ``early_exit``: CALM softmax-response exits, ``layers_early_exit.py``.
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
            info = ctx.begin_layer(x)
            x = block(x, ctx, info)
        return x

    def attention(self, index: int):
        return self.blocks[index].attn


from .layers_early_exit import EarlyExitStack  # noqa: E402  (they build on StandardStack / Block)
from .layers_gated import GatedStack, check_gated  # noqa: E402
from .layers_reversible import ReversibleStack, check_reversible  # noqa: E402
from .layers_universal import UniversalStack  # noqa: E402

register(LAYER, Variant("standard", "Vaswani et al. 2017",
                        "A stack of independent blocks: attention sublayer, then feed-forward sublayer.",
                        build=StandardStack))
register(LAYER, Variant(
    "reversible", "Gomez et al. 2017 (RevNet); Kitaev et al. 2020 (Reformer)",
    "Two residual streams; each layer's input is recomputed from its output in backward, so "
    "activation memory does not grow with depth.",
    build=ReversibleStack, params=("norm_placement", "dropout"), check=check_reversible))
register(LAYER, Variant(
    "universal", "Dehghani et al. 2019 (Universal Transformer); Graves 2016 (ACT)",
    "One shared block applied n_layers times with a position + step timing signal; optional ACT halting.",
    build=UniversalStack, params=("act", "act_threshold", "ponder_weight")))
register(LAYER, Variant(
    "gated", "Parisotto et al. 2020 (GTrXL)",
    "GRU-type gates replace the residual additions, biased toward the identity at initialisation.",
    build=GatedStack, params=("norm",), check=check_gated))
register(LAYER, Variant(
    "early_exit", "Elbayad et al. 2020 (Depth-adaptive); Schuster et al. 2022 (CALM)",
    "The LM head reads every layer; a token stops at the first layer whose top-1 probability "
    "exceeds exit_threshold.",
    build=EarlyExitStack, params=("exit_threshold",)))
