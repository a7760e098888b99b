"""The attention sublayer and the standard transformer block (attention then FFN).

``Attention`` reads two things from the forward context besides its input: the layer's memory
prefix (hidden states prepended to keys/values: Transformer-XL, compressive, memory tokens), an
optional hook that replaces the core call (the kNN layer of the Memorizing Transformer gets the
pre-position queries/keys to retrieve with and mixes retrieved and local attention), and the
``Interventions`` record (``models/interventions.py``: its core observer, its head replacements;
``ModelConfig.ablate_heads`` goes through the same head replacement). Memory
prefixes live in the space of the attention input (after a pre-norm), so memory and current
tokens are projected alike. When attention weights are requested (``ctx.need_weights``), the
layer's ``LayerInfo`` also keeps the post-position ``q``, ``k`` and score modifiers (detached references, no
copy), so the explorer can compare an approximate mechanism with exact softmax on the same inputs.

A block owns its sublayers and two residual wrappers from ``NORM_PLACEMENT``; which of post / pre
/ sandwich / ReZero / none is used is a registry lookup, never a flag.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .attention import ATTENTION
from .capabilities import AttentionCaps, refused_modifiers
from .context import LayerInfo
from .errors import ConfigError
from .ffn import FFN
from .interventions import ablation_points, replace_head_results
from .norms import NORM, NORM_PLACEMENT
from .positions import POSITION
from .qkv import QKVProjection


class Attention(QKVProjection):
    """Q/K/V projections (``models.qkv``), position modifier, the registry's attention core, output
    projection. The layer's own config (``cfg.layer_config(layer)``: a ``layer_schedule``'s kind, else
    ``cfg``) picks the core; a layer whose position differs from the model's (``:nope``, a local RoPE base)
    keeps its own weightless position module instead of the model's."""

    def __init__(self, cfg, layer: int):
        super().__init__(cfg)
        model_cfg, cfg = cfg, cfg.layer_config(layer)
        self.cfg, self.layer = cfg, layer
        self.core = ATTENTION[cfg.attention].build(cfg)
        self.caps = ATTENTION[cfg.attention].caps or AttentionCaps()
        own = (cfg.position, cfg.rope_base) != (model_cfg.position, model_cfg.rope_base)
        self.position = POSITION[cfg.position].build(cfg) if own else None  # None: the model's (ctx.position)

    def forward(self, x, ctx, info: LayerInfo):
        cfg = self.cfg
        L = x.shape[1]
        index = info.index
        if ctx.memory is not None and ctx.memory.records_input:
            info.attn_input = x.detach()  # becomes this layer's memory for the next segment
        mem = ctx.prefix(index)
        kv_in = x if mem is None else torch.cat([mem.to(x.dtype), x], dim=1)  # (B, P + L, d)
        q, k, v = self.project(x, kv_in)  # (B, h, L, d_h), (B, h_kv, P + L, d_h) twice
        prefix = k.shape[2] - L
        q_raw, k_raw = q, k
        position = ctx.position if self.position is None else self.position
        q, k, mods = position.modify(q, k, self.layer, k_start=ctx.k_start - prefix, scale=1.0 / math.sqrt(self.d_head))
        refused = refused_modifiers(mods, self.caps)
        if refused:  # a position encoding whose capabilities do not declare what it produced
            raise ConfigError(
                "position",
                cfg.position,
                f"an encoding attention={cfg.attention!r} honours: it produced {sorted(refused)} "
                f"modifiers and {cfg.attention} {self.caps.refuses_because or 'does not accept them'}",
            )
        if ctx.need_weights:  # display only: lets the explorer redo exact softmax on these very q, k
            info.q, info.k = q.detach(), k.detach()  # (B, h, L, d_h), (B, h_kv, P + L, d_h)
            info.score_mods = {n: t.detach() if isinstance(t, torch.Tensor) else t for n, t in mods.items()}
        if ctx.interventions is not None:  # the record's read point at the core (models/interventions.py)
            ctx.interventions.at_core(self, q, k, v, mods)
        hook = ctx.attention_hook(index)
        if hook is None:
            out, probs, aux = self.core(q, k, v, mods, ctx)
        else:  # a memory that changes this layer's attention (kNN) wraps the core call
            out, probs, aux = hook(self.core, q, k, v, mods, ctx, q_raw=q_raw, k_raw=k_raw, info=info)
        info.attention = probs
        info.record(**aux)
        if cfg.ablate_heads:  # ablated heads (a config field): the record's "zero", through the same function;
            # their output never reaches the residual stream (their map still shows)
            out = replace_head_results(ablation_points(cfg), self.layer, out)
        if ctx.interventions is not None:  # cached / replaced head results (models/interventions.py)
            out = ctx.interventions.at_heads(self, out, info)
        return self.merge(out)


class Block(nn.Module):
    """``x -> Residual(Attention) -> Residual(FFN)`` with the configured norm placement."""

    def __init__(self, cfg, layer: int):
        super().__init__()
        self.layer = layer
        placement = NORM_PLACEMENT[cfg.norm_placement].build
        make_norm = lambda: NORM[cfg.norm].build(cfg.d_model, cfg)  # noqa: E731
        self.attn = Attention(cfg, layer)
        self.res_attn = placement(cfg, make_norm)
        ffn = FFN[cfg.ffn].build
        self.ffn = ffn(cfg) if ffn is not None else None
        self.res_ffn = placement(cfg, make_norm) if self.ffn is not None else None

    def forward(self, x, ctx, info: LayerInfo):
        x = self.res_attn(x, lambda h: self.attn(h, ctx, info))
        if self.ffn is not None:
            x = self.res_ffn(x, lambda h: self._ffn(h, ctx, info))
        return x

    def _ffn(self, h, ctx, info):
        y, aux = self.ffn(h, ctx.tokens)
        info.record_ffn(aux)
        if ctx.interventions is not None:
            y = ctx.interventions.at_ffn(self.layer, y, info)
        return y
