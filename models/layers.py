"""Layer structures (docs/catalogue.md section 8): how blocks are stacked.

``build(cfg)`` returns an ``nn.Module`` with ``forward(x, ctx) -> x`` that opens one ``LayerInfo``
per applied layer with ``ctx.begin_layer(x)`` (``input``: the hidden states entering that layer,
``index``: its position in the stack) and ``attention(index)``: the ``Attention`` module that
layer ``index`` runs (the compressive memory trains its compression against it).

- ``standard``: independent blocks (Vaswani et al. 2017), below.
- ``reversible``: Reformer / RevNet, ``layers_reversible.py``.
- ``universal``: Universal Transformer with optional ACT, ``layers_universal.py``.
- ``gated``: GTrXL gating, ``layers_gated.py``.
- ``early_exit``: CALM softmax-response exits, ``layers_early_exit.py``.
- ``macaron``: half-step FFN, attention, half-step FFN (Macaron Net), ``layers_macaron.py``.
- ``feedback``: one token per step, all layers read a shared memory (Fan et al. 2020),
  ``layers_feedback.py``.
- ``funnel``: blocks on a sequence mean-pooled by 2 between them (Dai et al. 2020), ``layers_funnel.py``.
- ``sandwich``: sublayers reordered ``a^s (af)^(n-s) f^s`` (Press et al. 2020), ``layers_sandwich.py``.
"""
from __future__ import annotations

import math

from torch import nn

from .blocks import Block
from .stack import BlockStack
from .layers_early_exit import EarlyExitStack
from .layers_macaron import MacaronStack, check_needs_ffn, macaron_params
from .layers_sandwich import SandwichStack, check_sandwich
from .layers_feedback import FeedbackStack, check_feedback, feedback_params
from .layers_funnel import FunnelStack, check_funnel
from .layers_gated import GatedStack, check_gated, gated_params
from .layers_reversible import ReversibleStack, check_reversible
from .layers_universal import UniversalStack, check_universal, universal_params
from .errors import ConfigError
from .variant import Variant, register

LAYER: dict = {}


class StandardStack(BlockStack):
    """``n_layers`` independent blocks, each an attention sublayer then an FFN sublayer."""

    def __init__(self, cfg):
        super().__init__(Block(cfg, i) for i in range(cfg.n_layers))


def stack_params(cfg, parts: dict) -> int:
    """``n_layers`` blocks: attention + its residual wrapper, FFN + its wrapper (when there is one).

    ``parts`` (from ``ModelConfig.approx_params``): ``attn`` (projections + core), ``ffn`` (None
    without an FFN), ``norm`` (one norm), ``residual`` (one placement wrapper)."""
    block = parts["attn"] + parts["residual"]
    if parts["ffn"] is not None:
        block += parts["ffn"] + parts["residual"]
    return cfg.n_layers * block


def check_early_exit(cfg):
    t = cfg.exit_threshold
    if not (math.isfinite(t) and 0 < t <= 1):
        raise ConfigError("exit_threshold", t, "a number in (0, 1] (a top-1 probability; 1 never exits early)")


register(LAYER, Variant("standard", "Vaswani et al. 2017",
                        "A stack of independent blocks: attention sublayer, then feed-forward sublayer.",
                        build=StandardStack, n_params=stack_params))
register(LAYER, Variant(
    "reversible", "Gomez et al. 2017 (RevNet); Kitaev et al. 2020 (Reformer)",
    "Two residual streams; each layer's input is recomputed from its output in backward, so "
    "activation memory does not grow with depth.",
    build=ReversibleStack, params=("norm_placement", "dropout"), check=check_reversible, n_params=stack_params))
register(LAYER, Variant(
    "universal", "Dehghani et al. 2019 (Universal Transformer); Graves 2016 (ACT)",
    "One shared block applied n_layers times with a position + step timing signal; optional ACT halting.",
    build=UniversalStack, params=("act", "act_threshold", "ponder_weight"), check=check_universal,
    n_params=universal_params))
register(LAYER, Variant(
    "gated", "Parisotto et al. 2020 (GTrXL)",
    "GRU-type gates replace the residual additions, biased toward the identity at initialisation.",
    build=GatedStack, params=("norm",), check=check_gated, n_params=gated_params))
register(LAYER, Variant(
    "early_exit", "Elbayad et al. 2020 (Depth-adaptive); Schuster et al. 2022 (CALM)",
    "The LM head reads every layer; a token stops at the first layer whose top-1 probability "
    "exceeds exit_threshold.",
    build=EarlyExitStack, params=("exit_threshold",), check=check_early_exit, n_params=stack_params))

# issue 11: Macaron (Lu et al. 2019), Sandwich (Press et al. 2020), Feedback (Fan et al. 2020), Funnel (Dai et al. 2020)
register(LAYER, Variant(
    "macaron", "Lu et al. 2019 (Macaron Net)",
    "Each layer is half a step of one FFN, attention, then half a step of a second FFN, each with "
    "the chosen norm placement.",
    build=MacaronStack, params=("ffn", "norm_placement"), check=check_needs_ffn("macaron"),
    n_params=macaron_params))
register(LAYER, Variant(
    "sandwich", "Press et al. 2020 (Sandwich Transformer)",
    "The 2n sublayers reordered as sandwich_coeff attention sublayers, alternating attention / FFN, "
    "then sandwich_coeff FFN sublayers.",
    build=SandwichStack, params=("sandwich_coeff",), check=check_sandwich, n_params=stack_params))
register(LAYER, Variant(
    "feedback", "Fan et al. 2020 (Feedback Transformer)",
    "Tokens run one step at a time; every layer attends to a memory of earlier steps, each step's "
    "memory a learned softmax-weighted sum of all layers' states.",
    build=FeedbackStack, params=("max_len",), check=check_feedback, n_params=feedback_params))
register(LAYER, Variant(
    "funnel", "Dai et al. 2020 (Funnel-Transformer)",
    "Equal blocks of layers with the sequence mean-pooled by 2 between them (pooled queries read the "
    "unpooled keys); tokens get the upsampled last block plus the first block's output.",
    build=FunnelStack, params=("funnel_blocks",), check=check_funnel, n_params=stack_params))
