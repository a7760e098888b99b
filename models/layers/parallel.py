"""Parallel hybrid layers (TII 2025, "Falcon-H1: A Family of Hybrid-Head Language Models"): in each layer a
softmax attention and a second token mixer (by default Mamba-2, ``models/attention/mamba2.py``) read the same
normed input side by side, and their outputs are summed into the residual stream.

Per layer ``i``, with the configured norm placement wrapping the summed branches as one sublayer::

    x = Res_1(x, h -> Attn_i(h) + Mixer_i(h))     pre-norm: x + Attn_i(Norm(x)) + Mixer_i(Norm(x))
    x = Res_2(x, h -> FFN_i(h))                   pre-norm: x + FFN_i(Norm(x))

``Attn_i`` is the layer's attention sublayer exactly as a standard block builds it (``models.blocks.Attention``
of ``cfg.layer_config(i)``: a ``layer_schedule`` varies it per layer, e.g. Hymba-like sliding-window and global
layers); ``Mixer_i`` is the same ``Attention`` machinery (its own projections, its core, its ``out_proj``) built
from the mixer's config (``mixer_config``): the model's config with ``attention = parallel_mixer`` (any attention
registry key; ``"mamba2"`` by default, ``"full"`` gives two attentions side by side), without a schedule, and
without the terms that belong to the attention branch (learned sinks, output gate, query/key norm, softcap,
query temperature, ablated heads). The mixer's config must pass the whole-model validation (its causal mode,
positions, sizes), refused as ``parallel_mixer`` with the reason otherwise. A memory is refused (its per-layer
state is read for one attention). Falcon-H1's constant multipliers on the branches (``attention_in_multiplier``,
``ssm_in/out_multiplier``, ``attention_out_multiplier``, ``key_multiplier`` and the in-projection's
``ssm_multipliers``) are scalings of linear maps, so a checkpoint reader folds them into those weights
(``models/hf/falcon_h1.py``); the layer itself is the plain sum.

Records: one ``LayerInfo`` per layer, the attention branch's (its map, ``q``, ``k`` and statistics, as in a
standard block, so every view of attention reads it unchanged); the mixer's own record (its map, e.g. Mamba-2's
implicit attention, its ``q``, ``k``, its statistics) is ``info.parallel``, a ``LayerInfo`` of the same index.
``ParallelStack.attention(i)`` is layer ``i``'s attention branch, ``ParallelStack.mixer(i)`` its mixer.
"""

from __future__ import annotations

from functools import lru_cache

from ..attention import ATTENTION
from ..blocks import Attention, Block
from ..context import LayerInfo
from ..errors import ConfigError
from ..variant import Param, Variant
from .stack import BlockStack, block_params

PARALLEL_MIXER = Param(
    "parallel_mixer",
    str,
    "mamba2",
    choices=tuple(ATTENTION),  # the app's dropdown; which of them fit beside attention is the check's to say
    label="Parallel mixer (beside attention, parallel_hybrid)",
)

# the attention branch's own terms, at their defaults in the mixer's config (module docstring)
ATTENTION_ONLY = {
    "attn_sinks": False,
    "attn_gate": "none",
    "qk_norm": "none",
    "softcap": None,
    "attn_temp_floor": None,
    "ablate_heads": "",
}
# a schedule's fields (the mixer is the same in every layer) and the structure the mixer is validated in
UNIFORM = {
    "layer": "standard",
    "layer_schedule": "",
    "rope_local_base": None,
    "dense_ffn": "swiglu",
    "dense_d_ff": None,
}


@lru_cache(maxsize=128)
def mixer_config(cfg):
    """The config ``Mixer_i`` is built from: ``cfg`` with ``attention = parallel_mixer``, uniform, without the
    attention branch's terms; a core with its own projections (``mamba2``, ``mla``) reads no ``head_dim``."""
    changes = {"attention": cfg.parallel_mixer, **ATTENTION_ONLY, **UNIFORM}
    rec = ATTENTION.get(cfg.parallel_mixer)
    if rec is not None and getattr(rec.caps, "own_projections", None):
        changes["head_dim"] = None
    return cfg.replace(**changes)


class MixerBranch(Attention):
    """``Mixer_i``: an ``Attention`` in every respect, marked so the views that read one attention per layer
    (``models.blocks.layer_attentions``: gradient norms, long-context maps) take the layer's attention branch."""

    parallel_mixer = True


class ParallelBlock(Block):
    """A standard block whose attention sublayer is ``Attn(h) + Mixer(h)`` on the one normed input."""

    def __init__(self, cfg, layer: int):
        super().__init__(cfg, layer)
        self.mixer = MixerBranch(mixer_config(cfg), layer)

    def forward(self, x, ctx, info: LayerInfo):
        x = self.res_attn(x, lambda h: self._branches(h, ctx, info))
        if self.ffn is not None:
            x = self.res_ffn(x, lambda h: self._ffn(h, ctx, info))
        return x

    def _branches(self, h, ctx, info: LayerInfo):
        mixed = LayerInfo(index=info.index, input=info.input)
        info.parallel = mixed
        return self.attn(h, ctx, info) + self.mixer(h, ctx, mixed)


class ParallelStack(BlockStack):
    def __init__(self, cfg):
        super().__init__(ParallelBlock(cfg, i) for i in range(cfg.n_layers))

    def mixer(self, index: int):
        """The mixer module (an ``Attention`` of ``mixer_config``) that layer ``index`` runs beside its attention."""
        return self.blocks[index].mixer


def check(cfg) -> None:
    key = cfg.parallel_mixer
    if key not in ATTENTION:
        raise ConfigError("parallel_mixer", key, f"one of {list(ATTENTION)} (the mixer beside each attention)")
    if cfg.memory != "none":
        raise ConfigError(
            "memory",
            cfg.memory,
            "'none' with layer='parallel_hybrid': a memory's per-layer state is read for one attention, and each "
            "layer here runs two mixers",
        )
    try:
        mixer_config(cfg).validate()
    except ConfigError as e:
        raise ConfigError(
            "parallel_mixer",
            key,
            f"a mixer whose own config is valid beside attention={cfg.attention!r}: in it {e.field}={e.value!r}: "
            f"{e.allowed}",
        ) from None


def parallel_params(cfg, parts: dict) -> int:
    """Per layer: a standard block plus the mixer's sublayer (its projections and core; no norm of its own)."""
    return cfg.n_layers * (block_params(parts) + parts["attn_of"](mixer_config(cfg)))


VARIANTS = (
    Variant(
        "parallel_hybrid",
        "TII 2025 (Falcon-H1: hybrid-head language models)",
        "Each layer runs attention and a second mixer (Mamba-2 by default) side by side on the same normed "
        "input and adds their outputs, then the feed-forward sublayer.",
        build=ParallelStack,
        params=(PARALLEL_MIXER, "norm_placement"),
        check=check,
        n_params=parallel_params,
    ),
)
