"""What each variant can produce or accept, and the one generic check of a combination.

Position encodings act on attention through *score modifiers*: keyword arguments of
``kernels.attention`` (see ``kernels/reference.py``) grouped into kinds:

- ``rotary``: q and k are rotated before the mechanism sees them (RoPE). Any mechanism that
  forms ``q . k`` (even through a feature map) honours it, so it needs no keyword.
- ``score_bias``: an additive bias per (query, key) pair: ``rel_bias`` (T5, Transformer-XL's
  position term) and ``alibi_slopes`` (ALiBi). Needs a score for every pair.
- ``relative_kv``: relative vectors added to keys / values inside attention: ``rel_k``, ``rel_v``
  (Shaw, Transformer-XL). Needs the mechanism to gather a vector per (query, key) distance.

A position encoding declares the kinds it produces (``PositionCaps``), an attention mechanism the
kinds it accepts and the causal settings it supports (``AttentionCaps``), a memory whether it prepends keys and whether
it needs a position encoding that never writes absolute positions into the embeddings (``MemoryCaps``).
:func:`check_combination` refuses what does not fit, with the reason, and the attention sublayer
refuses at run time any modifier its mechanism does not accept (:func:`refused_modifiers`), so a new
bias-type encoding can never be silently dropped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .errors import ConfigError

ROTARY = "rotary"
SCORE_BIAS = "score_bias"
RELATIVE_KV = "relative_kv"
PAIR_SCORE = "pair_score"  # a full [B or 1, h, Lq, Lk] term added to the scores (DeBERTa p2c, TUPE)
KINDS = frozenset({ROTARY, SCORE_BIAS, RELATIVE_KV, PAIR_SCORE})
# Not a position kind: learned sink logits [h] joining each softmax row's denominator (models/sinks.py,
# ModelConfig.attn_sinks). Accepted only by mechanisms whose softmax runs in kernels.attention.
LEARNED_SINK = "learned_sink"
# What a mechanism accepts unless it says otherwise: the per-distance modifiers. A full per-pair
# score (PAIR_SCORE) must be opted into by mechanisms that hand it to kernels.attention.
PER_DISTANCE = frozenset({ROTARY, SCORE_BIAS, RELATIVE_KV})

# keyword of kernels.attention -> modifier kind
MODIFIER_KIND = {
    "rel_bias": SCORE_BIAS,
    "alibi_slopes": SCORE_BIAS,
    "rel_k": RELATIVE_KV,
    "rel_v": RELATIVE_KV,
    "pair_bias": PAIR_SCORE,
    "sinks": LEARNED_SINK,
}


@dataclass(frozen=True)
class PositionCaps:
    produces: frozenset = frozenset()  # modifier kinds this encoding hands to attention
    relative: bool = False  # encodes the distance j - i (inside attention)
    absolute: bool = False  # adds absolute positions to the token embeddings


@dataclass(frozen=True)
class AttentionCaps:
    accepts: frozenset = PER_DISTANCE  # modifier kinds the mechanism honours
    refuses_because: str = "forms its scores in its own code, which adds no per-pair score term"
    memory_keys: bool = True  # accepts keys prepended before the queries (memory)
    shared_qk: bool = False  # keys are the unit-normalised queries (Reformer's shared-QK)
    causal_modes: frozenset = frozenset({True, False})  # the causal settings it supports
    causal_reason: str = ""  # why the other setting is not supported
    # why learned sinks (attn_sinks) do not apply, when LEARNED_SINK is not accepted
    sinks_reason: str = (
        "computes its attention weights in its own code, not in the softmax of kernels.attention, "
        "so no learned sink logit joins a denominator"
    )
    # cfg -> the per-head width of the values the core returns, for a core that owns its Q/K/V projections and
    # rotation (MLA: a shared latent and a decoupled RoPE key): the sublayer then builds only ``out_proj`` and
    # calls ``core.project(x_q, x_kv, position, layer, k_start) -> (q, k, v, mods)`` instead of its own
    own_projections: Callable | None = None
    rotary_parts: int = 1  # the sublayer rotates each head's q, k as this many equal parts (Differential's halves)
    layer_index: bool = False  # the core is built as ``build(cfg, layer)``: its formula depends on its depth
    # effective attention rows sum to one (False: one sum per head, Differential's 1 - lambda; None: no fixed sum,
    # a recurrent mixer's implicit map, Gated DeltaNet's)
    rows_sum_to_one: bool | None = True
    # cfg -> numbers per token and layer a decoding cache keeps (None: K and V, 2 * kv_heads * d_head)
    cache_values: Callable | None = None
    # cfg -> numbers a decoding layer keeps whatever the context length, for a recurrent mixer (its state and
    # its short convolution's last inputs: Mamba-2, Gated DeltaNet); such a layer caches no keys at all
    state_values: Callable | None = None
    # keywords a core with its own projections hands from ``project`` to its forward beside the position's
    # modifiers (Mamba-2's dt, z; Gated DeltaNet's beta, g, z): its own inputs, never refused as position modifiers
    core_mods: frozenset = frozenset()
    # the core gates its own output (Gated DeltaNet's gated norm): ``attn_gate`` is refused with it, and a
    # ``layer_schedule``'s layers of it drop the model's gate, which belongs to its attention layers
    own_gate: bool = False


@dataclass(frozen=True)
class MemoryCaps:
    prepends_keys: bool = False  # prepends memory to every layer's keys / values
    relative_only: bool = False  # needs positions that never restart: no absolute encoding


def modifier_kinds(mods: dict) -> set:
    """The kinds of the modifiers in ``mods`` (an unknown keyword is its own, unaccepted, kind)."""
    return {MODIFIER_KIND.get(name, name) for name in mods}


def refused_modifiers(mods: dict, caps: AttentionCaps) -> set:
    return modifier_kinds({n: t for n, t in mods.items() if n not in caps.core_mods}) - caps.accepts


def check_combination(cfg, regs: dict) -> None:
    """Refuse a causal setting / position / attention / memory combination whose capabilities do not fit."""
    att, pos, mem = regs["attention"][cfg.attention], regs["position"][cfg.position], regs["memory"][cfg.memory]
    a_caps = att.caps or AttentionCaps()
    p_caps = pos.caps or PositionCaps()
    m_caps = mem.caps or MemoryCaps()
    if bool(cfg.causal) not in a_caps.causal_modes:
        (only,) = a_caps.causal_modes
        raise ConfigError(
            "causal", bool(cfg.causal), f"only causal={only} with attention={cfg.attention!r}: {a_caps.causal_reason}"
        )
    missing = p_caps.produces - a_caps.accepts
    if missing:
        ok = [k for k, v in regs["position"].items() if (v.caps or PositionCaps()).produces <= a_caps.accepts]
        raise ConfigError(
            "position",
            cfg.position,
            f"one of {ok} with attention={cfg.attention!r}: position={cfg.position!r} produces "
            f"{', '.join(sorted(missing))} modifiers and {cfg.attention} {a_caps.refuses_because}",
        )
    if getattr(cfg, "attn_sinks", False) and LEARNED_SINK not in a_caps.accepts:
        ok = [k for k, v in regs["attention"].items() if LEARNED_SINK in (v.caps or AttentionCaps()).accepts]
        raise ConfigError(
            "attn_sinks",
            True,
            f"False with attention={cfg.attention!r} (learned sinks need a softmax attention: {', '.join(ok)}): "
            f"{cfg.attention} {a_caps.sinks_reason}",
        )
    if m_caps.prepends_keys and not a_caps.memory_keys:
        ok = [k for k, v in regs["attention"].items() if (v.caps or AttentionCaps()).memory_keys]
        raise ConfigError(
            "memory",
            cfg.memory,
            f"'none' with attention={cfg.attention!r}: memory={cfg.memory!r} prepends memory to the keys "
            f"(more keys than queries), which needs a softmax pattern attention ({', '.join(ok)})",
        )
    if m_caps.relative_only and p_caps.absolute:
        ok = [k for k, v in regs["position"].items() if not (v.caps or PositionCaps()).absolute]
        raise ConfigError(
            "position",
            cfg.position,
            f"one of {ok} with memory={cfg.memory!r}: it needs relative or no positions; an absolute encoding "
            "restarts at every segment, so memory and current tokens would share positions",
        )
