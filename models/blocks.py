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
from .output_gate import gate_heads, make_gate
from .positions import POSITION
from .qkv import QKVProjection
from .sinks import make_sinks
from .temperature import temper


class Attention(QKVProjection):
    """Q/K/V projections (``models.qkv``), position modifier, the registry's attention core, output
    projection; optionally learned sink logits ``sinks [h]`` handed to the core as the ``sinks``
    modifier (``models/sinks.py``) and a sigmoid gate on the heads' results before the output
    projection (``gate_proj``, ``models/output_gate.py``). The layer's own config
    (``cfg.layer_config(layer)``: a ``layer_schedule``'s kind, else ``cfg``) picks the core; a layer whose
    position differs from the model's (``:nope``, a local RoPE base) keeps its own weightless position module
    instead of the model's."""

    # True for the mixer beside a parallel_hybrid layer's attention (models/layers/parallel.py): not the layer's
    # attention, so views that read one attention per layer (``layer_attentions``) leave it out
    parallel_mixer = False

    def __init__(self, cfg, layer: int):
        model_cfg, cfg = cfg, cfg.layer_config(layer)
        rec = ATTENTION[cfg.attention]
        caps = rec.caps or AttentionCaps()
        super().__init__(cfg, d_value=caps.own_projections(cfg) if caps.own_projections else None)
        self.cfg, self.layer = cfg, layer
        self.core = rec.build(cfg, layer) if caps.layer_index else rec.build(cfg)
        self.caps = caps
        self.sinks = make_sinks(cfg)  # (h,) or None
        self.gate_proj = make_gate(cfg)  # d_model -> h or h * d_h, or None
        own = (cfg.position, cfg.rope_base) != (model_cfg.position, model_cfg.rope_base)
        self.position = POSITION[cfg.position].build(cfg) if own else None  # None: the model's (ctx.position)

    def sink_mods(self) -> dict:
        """``{"sinks": self.sinks}`` for a core call, or ``{}`` without learned sinks."""
        return {} if self.sinks is None else {"sinks": self.sinks}

    def forward(self, x, ctx, info: LayerInfo):
        cfg = self.cfg
        L = x.shape[1]
        index = info.index
        if ctx.memory is not None and ctx.memory.records_input:
            info.attn_input = x.detach()  # becomes this layer's memory for the next segment
        mem = ctx.prefix(index)
        kv_in = x if mem is None else torch.cat([mem.to(x.dtype), x], dim=1)  # (B, P + L, d)
        prefix = kv_in.shape[1] - L
        position = ctx.position if self.position is None else self.position
        if self.caps.own_projections:  # the core projects and rotates itself (MLA: models/attention/mla.py)
            q, k, v, mods = self.core.project(x, kv_in, position, self.layer, k_start=ctx.k_start - prefix)
            q_raw, k_raw = q, k
        else:
            q, k, v = self.project(x, kv_in)  # (B, h, L, d_h), (B, h_kv, P + L, d_h) twice
            q_raw, k_raw = q, k
            q, k, mods = self._position(position, ctx, q, k, prefix)
        q = temper(cfg, q, ctx.k_start)  # Llama 4's NoPE layers: queries scaled by position (models/temperature.py)
        mods = {**mods, **self.sink_mods()}
        refused = refused_modifiers(mods, self.caps)
        if refused:  # a position encoding whose capabilities do not declare what it produced
            raise ConfigError(
                "position",
                cfg.position,
                f"an encoding attention={cfg.attention!r} honours: it produced {sorted(refused)} "
                f"modifiers and {cfg.attention} {self.caps.refuses_because or 'does not accept them'}",
            )
        if ctx.need_weights and not self.caps.own_projections:  # display only: lets the explorer redo exact
            # softmax on these very q, k (a core with its own projections reports its per-head q, k in its aux)
            info.q, info.k = q.detach(), k.detach()  # (B, h, L, d_h), (B, h_kv, P + L, d_h)
            info.score_mods = {n: t.detach() if isinstance(t, torch.Tensor) else t for n, t in mods.items()}
        if ctx.interventions is not None:  # the record's read point at the core (models/interventions.py)
            ctx.interventions.at_core(self, q, k, v, mods)
        hook = ctx.attention_hook(index)
        if hook is None:
            out, probs, aux = self.core(q, k, v, mods, ctx)
        else:  # a memory that changes this layer's attention (kNN) wraps the core call
            out, probs, aux = hook(self.core, q, k, v, mods, ctx, q_raw=q_raw, k_raw=k_raw, info=info)
        out = gate_heads(self.gate_proj, x, out)  # G1 gate: the heads' results, before ablation / out_proj
        info.attention = probs
        info.record(**aux)
        if cfg.ablate_heads:  # ablated heads (a config field): the record's "zero", through the same function;
            # their output never reaches the residual stream (their map still shows)
            out = replace_head_results(ablation_points(cfg), self.layer, out)
        if ctx.interventions is not None:  # cached / replaced head results (models/interventions.py)
            out = ctx.interventions.at_heads(self, out, info)
        return self.merge(out)

    def _position(self, position, ctx, q, k, prefix: int):
        """The position encoding's ``modify``; a mechanism with ``rotary_parts = n`` has each head rotated as
        ``n`` heads of ``d_h / n`` (Differential attention's two half-heads, as its official code)."""
        n, k_start = self.caps.rotary_parts, ctx.k_start - prefix
        if n == 1:
            return position.modify(q, k, self.layer, k_start=k_start, scale=1.0 / math.sqrt(self.d_head))

        def split(t):  # (B, h, L, d_h) -> (B, h * n, L, d_h / n): head i's part j is head i * n + j
            return t.unflatten(-1, (n, -1)).transpose(2, 3).flatten(1, 2)

        def merge(t):  # the inverse of split
            return t.unflatten(1, (-1, n)).transpose(2, 3).flatten(-2)

        qs, ks, mods = position.modify(
            split(q), split(k), self.layer, k_start=k_start, scale=1.0 / math.sqrt(self.d_head // n)
        )
        return merge(qs), merge(ks), mods


def layer_attentions(model: nn.Module) -> list:
    """The ``Attention`` modules of ``model`` that are a layer's attention, in definition order: every one but the
    mixers beside a parallel_hybrid layer's attention (one per layer for the standard stack)."""
    return [m for m in model.modules() if isinstance(m, Attention) and not m.parallel_mixer]


class Block(nn.Module):
    """``x -> Residual(Attention) -> Residual(FFN)`` with the configured norm placement."""

    def __init__(self, cfg, layer: int):
        super().__init__()
        self.layer = layer
        placement = NORM_PLACEMENT[cfg.norm_placement].build
        make_norm = lambda: NORM[cfg.norm].build(cfg.d_model, cfg)  # noqa: E731
        self.attn = Attention(cfg, layer)
        self.res_attn = placement(cfg, make_norm)
        own = cfg.layer_config(layer)  # a schedule's ':dense' layer builds its dense FFN, the rest the model's
        ffn = FFN[own.ffn].build
        self.ffn = ffn(own) if ffn is not None else None
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
