"""Layer structures (docs/catalogue.md section 8): how blocks are stacked.

``build(cfg)`` returns an ``nn.Module`` with ``forward(x, ctx) -> x`` that opens one ``LayerInfo``
per applied layer with ``ctx.begin_layer(x)`` (``input``: the hidden states entering that layer,
``index``: its position in the stack) and ``attention(index)``: the ``Attention`` module that
layer ``index`` runs (the compressive memory trains its compression against it).

One module per structure, each ending with ``VARIANTS`` (``LAYER`` gathers them in dropdown order):
- ``standard``: independent blocks (Vaswani et al. 2017), ``standard.py``.
- ``reversible``: Reformer / RevNet, ``reversible.py``.
- ``universal``: Universal Transformer with optional ACT, ``universal.py``.
- ``gated``: GTrXL gating, ``gated.py``.
- ``early_exit``: CALM softmax-response exits, ``early_exit.py``.
- ``macaron``: half-step FFN, attention, half-step FFN (Macaron Net), ``macaron.py``.
- ``sandwich``: sublayers reordered ``a^s (af)^(n-s) f^s`` (Press et al. 2020), ``sandwich.py``.
- ``feedback``: one token per step, all layers read a shared memory (Fan et al. 2020), ``feedback.py``.
- ``funnel``: blocks on a sequence mean-pooled by 2 between them (Dai et al. 2020), ``funnel.py``.
- ``parallel_hybrid``: attention and a second mixer (Mamba-2) side by side, outputs summed (Falcon-H1, TII 2025),
  ``parallel.py``.
``stack.py`` holds what they share (``BlockStack``, the parameter count of standard blocks, the
model's weight initialisation). No module imports this package back.
"""

from __future__ import annotations

from ..variant import gather
from . import early_exit, feedback, funnel, gated, macaron, parallel, reversible, sandwich, standard, universal
from .stack import BlockStack, block_params, init_weights, stack_params
from .standard import StandardStack

LAYER = gather(
    standard.VARIANTS,
    reversible.VARIANTS,
    universal.VARIANTS,
    gated.VARIANTS,
    early_exit.VARIANTS,
    macaron.VARIANTS,
    sandwich.VARIANTS,
    feedback.VARIANTS,
    funnel.VARIANTS,
    parallel.VARIANTS,
)

__all__ = ["LAYER", "BlockStack", "StandardStack", "block_params", "stack_params", "init_weights"]
