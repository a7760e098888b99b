"""The standard layer structure (Vaswani et al. 2017): ``n_layers`` independent blocks, each an
attention sublayer then an FFN sublayer, with the configured norm placement."""
from __future__ import annotations

from ..blocks import Block
from ..variant import Variant
from .stack import BlockStack, stack_params


class StandardStack(BlockStack):
    """``n_layers`` independent blocks, each an attention sublayer then an FFN sublayer."""

    def __init__(self, cfg):
        super().__init__(Block(cfg, i) for i in range(cfg.n_layers))


VARIANTS = (
    Variant("standard", "Vaswani et al. 2017",
            "A stack of independent blocks: attention sublayer, then feed-forward sublayer.",
            build=StandardStack, n_params=stack_params),
)
