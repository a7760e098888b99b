"""The architecture choice: decoder-only, encoder-only, encoder-decoder.

- ``decoder_only``: one stack and a language-model head (GPT; every config before this choice).
  ``causal`` keeps its meaning: ``causal=False`` is a bidirectional stack with the same head.
- ``encoder_only``: one bidirectional stack (``causal=False`` required) with BERT's masked-LM head
  (Devlin et al. 2019): dense ``d -> d``, GELU, the configured norm, then the vocabulary
  projection with a bias. ``model(tokens)`` as for decoder-only.
- ``encoder_decoder``: Vaswani et al. 2017. A bidirectional encoder stack of ``n_encoder_layers``
  and a causal decoder stack of ``n_decoder_layers`` (None = ``n_layers``) whose every layer is
  self-attention, cross-attention over the encoder output, FFN, each with the chosen norm
  placement. ``model(src, tgt, src_mask=None)``; assembled in ``models/encdec.py``.

Each record's ``build(cfg)`` is the family's factory: the **output head** (final hidden states
``(B, L, d)`` -> logits). Its ``caps`` (:class:`ArchitectureCaps`) say whether the model reads a
source through cross-attention, which is what ``build_model`` dispatches on. ``n_params(cfg)`` is
what the architecture adds to a decoder-only model of ``n_layers`` (MLM head; the second stack,
the cross-attention sublayers and the other stack's layer count), so ``approx_params`` stays exact.

This module is imported by the registry (so by the config): it must not import the config or the
model assembly.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch.nn.functional as F
from torch import nn

from .errors import ConfigError
from .norms import NORM, NORM_PLACEMENT
from .qkv import projection_params
from .variant import Param, Variant, gather

# the depth of each stack of an encoder-decoder, capped like n_layers; None: n_layers
N_ENCODER_LAYERS = Param("n_encoder_layers", int, None, optional=True, range=(1, 512), cap=12)
N_DECODER_LAYERS = Param("n_decoder_layers", int, None, optional=True, range=(1, 512), cap=12)


@dataclass(frozen=True)
class Stack:
    """One stack of layers in an architecture: the sequence it reads, whether it always reads in both
    directions, the earlier stacks it cross-attends to in every layer, and the field of its depth."""

    name: str  # "decoder", "encoder": how figures and results name it
    reads: str  # its input sequence: "tokens" (the one sequence), "source" or "target"
    bidirectional: bool = False  # True: causal=False whatever the config says (an encoder)
    attends: tuple = ()  # names of earlier stacks whose output it reads through cross-attention
    depth_field: str | None = None  # the config field of its layer count; None (or its value None): n_layers


@dataclass(frozen=True)
class Arrangement:
    """A model as data: its stacks in the order they run (the head reads the last one's output).
    Everything that runs a model for the app (maps, gradients, sweeps, training, figures) walks this
    record instead of asking which architecture it is, so a new arrangement is one record."""

    stacks: tuple

    @property
    def inputs(self) -> tuple:
        """The sequences the model is called with, in call order: ``("tokens",)`` or ``("source", "target")``."""
        return tuple(dict.fromkeys(s.reads for s in self.stacks))

    @property
    def head(self) -> Stack:
        """The stack the output head reads: its self-attention is the model's main attention map."""
        return self.stacks[-1]

    @property
    def cross(self) -> tuple:
        """``(reader, source)`` stack-name pairs of every cross-attention."""
        return tuple((s.name, other) for s in self.stacks for other in s.attends)

    def stack(self, name: str) -> Stack:
        return next(s for s in self.stacks if s.name == name)


@dataclass(frozen=True)
class ArchitectureCaps:
    arrangement: Arrangement

    @property
    def cross_attention(self) -> bool:
        """model(src, tgt): a stack reads another stack's output through cross-attention."""
        return bool(self.arrangement.cross)


DECODER = Arrangement((Stack("decoder", "tokens"),))
ENCODER = Arrangement((Stack("encoder", "tokens", bidirectional=True),))
ENCODER_DECODER = Arrangement(
    (
        Stack("encoder", "source", bidirectional=True, depth_field="n_encoder_layers"),
        Stack("decoder", "target", attends=("encoder",), depth_field="n_decoder_layers"),
    )
)


# ---------------------------------------------------------------------------- heads
def lm_head(cfg) -> nn.Module:
    """Language-model head: one projection to the vocabulary, no bias (the model's existing head)."""
    return nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)


class MLMHead(nn.Module):
    """BERT's masked-LM head: ``W_out norm(gelu(W x + b)) + b_out`` (a transform before the vocabulary,
    so the last encoder layer's output need not itself be a token prediction)."""

    def __init__(self, cfg):
        super().__init__()
        self.dense = nn.Linear(cfg.d_model, cfg.d_model)
        self.norm = NORM[cfg.norm].build(cfg.d_model, cfg)
        self.decoder = nn.Linear(cfg.d_model, cfg.vocab_size)
        self.approximate = cfg.gelu_approx  # the GELU of the FFNs (BERT's head uses its hidden_act)

    @property
    def weight(self):
        """The vocabulary projection, so code reading ``model.head.weight`` (device, gradients) works."""
        return self.decoder.weight

    def forward(self, x):
        return self.decoder(self.norm(F.gelu(self.dense(x), approximate=self.approximate)))


# ---------------------------------------------------------------------------- stacks
def arrangement(cfg) -> Arrangement:
    """The arrangement of ``cfg``'s architecture (its record's capabilities)."""
    return ARCHITECTURE[cfg.architecture].caps.arrangement


def stack_depth(cfg, stack: Stack) -> int:
    depth = getattr(cfg, stack.depth_field) if stack.depth_field else None
    return cfg.n_layers if depth is None else depth


def stack_config(cfg, stack: Stack):
    """The config one stack of ``cfg`` is built from: a single-stack config as it is; a stack of a
    multi-stack architecture as a single stack (encoder-only when it is bidirectional), its own depth."""
    if len(arrangement(cfg).stacks) == 1:
        return cfg
    depth_fields = {s.depth_field: None for s in arrangement(cfg).stacks if s.depth_field}
    if stack.bidirectional:
        return cfg.replace(architecture="encoder_only", causal=False, n_layers=stack_depth(cfg, stack), **depth_fields)
    return cfg.replace(architecture="decoder_only", n_layers=stack_depth(cfg, stack), **depth_fields)


def n_encoder_layers(cfg) -> int:
    return stack_depth(cfg, ENCODER_DECODER.stack("encoder"))


def n_decoder_layers(cfg) -> int:
    return stack_depth(cfg, ENCODER_DECODER.stack("decoder"))


def encoder_config(cfg):
    """The config the encoder stack of an encoder-decoder is built from: bidirectional, its own depth."""
    return stack_config(cfg, ENCODER_DECODER.stack("encoder"))


def decoder_config(cfg):
    """The config the decoder stack is built from (causal, as ``cfg`` says; its own depth)."""
    return stack_config(cfg, ENCODER_DECODER.stack("decoder"))


# ---------------------------------------------------------------------------- checks
def check_encoder_only(cfg) -> None:
    if cfg.causal:
        raise ConfigError(
            "causal",
            cfg.causal,
            "False with architecture='encoder_only': an encoder reads its whole input in both "
            "directions (BERT); for a causal stack choose architecture='decoder_only'",
        )
    if cfg.memory != "none":
        raise ConfigError(
            "memory",
            cfg.memory,
            "'none' with architecture='encoder_only': a memory carries hidden states from earlier "
            "segments of a left-to-right stream; an encoder reads its whole input at once",
        )


# Why each non-standard layer structure is not offered for the encoder-decoder.
_LAYER_REASONS = {
    "reversible": "the reversible coupling y1 = x1 + F(x2), y2 = x2 + G(y1) has room for two sublayers per "
    "layer; a decoder layer has three (self-attention, cross-attention, FFN)",
    "universal": "the Universal Transformer's shared block with ACT halting is built for one stack; a shared "
    "decoder block with cross-attention and per-stack halting is not built",
    "gated": "GTrXL's gates replace the residuals of a two-sublayer block (an RL decoder); a gated "
    "cross-attention sublayer is not defined by the paper",
    "early_exit": "early exits would have to skip the cross-attention of later decoder layers (CALM "
    "propagates their keys/values); not built",
}


def check_encoder_decoder(cfg) -> None:
    if not cfg.causal:
        raise ConfigError(
            "causal",
            cfg.causal,
            "True with architecture='encoder_decoder': causal names the decoder, which predicts the "
            "target left to right (the encoder is always bidirectional)",
        )
    if cfg.memory != "none":
        raise ConfigError(
            "memory",
            cfg.memory,
            "'none' with architecture='encoder_decoder': the encoder reads the whole source at once "
            "(nothing earlier to remember), and a segmented decoder would need its memory and the "
            "cross-attention over one source to agree; not built",
        )
    if cfg.layer != "standard":
        reason = _LAYER_REASONS.get(cfg.layer, "only the standard stack takes a cross-attention sublayer")
        raise ConfigError("layer", cfg.layer, f"'standard' with architecture='encoder_decoder': {reason}")
    try:  # every other choice applies to the encoder too, where it must hold bidirectionally
        encoder_config(cfg).validate()
    except ConfigError as e:
        raise ConfigError(
            e.field,
            e.value,
            f"{e.allowed} (in the encoder of architecture='encoder_decoder', which is always "
            "bidirectional: causal=False there)",
        ) from None


# ---------------------------------------------------------------------------- parameter counts
def mlm_head_params(cfg) -> int:
    norm = NORM.get(cfg.norm)
    norm_params = norm.n_params(cfg) if norm is not None and norm.n_params else 0
    return cfg.d_model * cfg.d_model + cfg.d_model + norm_params + cfg.vocab_size


def cross_attention_params(cfg) -> int:
    """One cross-attention sublayer: its projections (``models.qkv``) and its residual wrapper."""
    norm, place = NORM.get(cfg.norm), NORM_PLACEMENT.get(cfg.norm_placement)
    norm_params = norm.n_params(cfg) if norm is not None and norm.n_params else 0
    residual = place.n_params(cfg, norm_params) if place is not None and place.n_params else 0
    return projection_params(cfg) + residual


def encoder_decoder_params(cfg) -> int:
    """Both stacks (each with its positions and final norm), one shared embedding, one head, and a
    cross-attention sublayer per decoder layer, minus the decoder-only model ``approx_params``
    already counted."""

    def single(n):  # a decoder-only model of n layers: embedding + head + positions + stack + final norm
        return cfg.replace(architecture="decoder_only", n_layers=n).approx_params()

    shared = 2 * cfg.vocab_size * cfg.d_model  # the encoder has no embedding or head of its own
    n_enc, n_dec = n_encoder_layers(cfg), n_decoder_layers(cfg)
    total = (single(n_enc) - shared) + single(n_dec) + n_dec * cross_attention_params(cfg)
    return total - single(cfg.n_layers)


# ---------------------------------------------------------------------------- registry
VARIANTS = (
    Variant(
        "decoder_only",
        "Radford et al. 2018 (GPT); Vaswani et al. 2017 (the decoder)",
        "One stack of layers and a language-model head; causal=True makes it a left-to-right decoder.",
        build=lm_head,
        params=("causal",),
        caps=ArchitectureCaps(DECODER),
    ),
    Variant(
        "encoder_only",
        "Devlin et al. 2019 (BERT)",
        "One bidirectional stack with a masked-LM head (dense, GELU, norm, vocabulary projection).",
        build=MLMHead,
        check=check_encoder_only,
        n_params=mlm_head_params,
        caps=ArchitectureCaps(ENCODER),
    ),
    Variant(
        "encoder_decoder",
        "Vaswani et al. 2017",
        "A bidirectional encoder reads the source; a causal decoder with cross-attention in every layer "
        "predicts the target: model(src, tgt).",
        build=lm_head,
        params=(N_ENCODER_LAYERS, N_DECODER_LAYERS),
        check=check_encoder_decoder,
        n_params=encoder_decoder_params,
        caps=ArchitectureCaps(ENCODER_DECODER),
    ),
)

ARCHITECTURE = gather(VARIANTS)
