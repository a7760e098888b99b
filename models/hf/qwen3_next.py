"""Qwen3-Next (Qwen Team 2025, "Qwen3-Next"; transformers' ``Qwen3NextForCausalLM``, ``model_type`` ``qwen3_next``):
a hybrid of Gated DeltaNet layers and gated full-attention layers, with a sparse mixture of experts.

Catalogue choices: decoder-only, causal, pre-norm ``rmsnorm`` (``rms_norm_eps``) with the final ``norm``, untied
head unless ``tie_word_embeddings``. Per layer, ``layer_types`` (default: every fourth layer ``full_attention``, the
others ``linear_attention``, as ``Qwen3NextConfig``) -> a ``layer_schedule`` of

- ``gated_deltanet`` (``models/attention/gated_deltanet.py``, transformers' ``Qwen3NextGatedDeltaNet`` one to one):
  ``linear_num_key_heads`` -> ``delta_key_heads``, ``linear_num_value_heads`` -> ``delta_value_heads``,
  ``linear_key_head_dim`` / ``linear_value_head_dim`` -> ``delta_key_dim`` / ``delta_value_dim``,
  ``linear_conv_kernel_dim`` -> ``delta_conv``; its gated norm's weight is read as stored (a plain gain).
- ``full``: ``num_attention_heads`` heads and ``num_key_value_heads`` K/V heads of ``head_dim`` (default 256),
  per-head q / k RMSNorm before RoPE (``qk_norm="head"``), RoPE on the first ``partial_rotary_factor`` of each head
  (``rope_fraction``; ``rope_parameters.rope_theta``), and the output gate: ``q_proj`` emits per head ``head_dim``
  query rows then ``head_dim`` gate rows, read as ``q_proj`` and the elementwise ``gate_proj``
  (``attn_gate="elementwise"``, ``models/output_gate.py``).

FFN: a layer ``i`` outside ``mlp_only_layers`` with ``(i + 1) % decoder_sparse_step == 0`` (and ``num_experts >
0``) is ``moe_qwen`` (``models/ffn/moe_qwen.py``: ``num_experts`` SwiGLU experts of ``moe_intermediate_size``,
top ``num_experts_per_tok`` of a softmax router, ``norm_topk_prob``, a shared expert of
``shared_expert_intermediate_size`` scaled by ``sigmoid(shared_expert_gate)``); the others a SwiGLU of
``intermediate_size`` (``:dense`` layers of the schedule when some layers are MoE).

Norm weights: Qwen3-Next's ``Qwen3NextRMSNorm`` multiplies by ``1 + w`` (zero-centred; the layer norms, the final
norm, q_norm and k_norm), so the catalogue's gain is read as ``1 + w``; the Gated DeltaNet's gated norm is a plain
``w``. Multi-token-prediction tensors (``mtp.*``) are not read, as transformers leaves them out.

Refused by name: ``hidden_act`` other than ``silu``, ``attention_bias``, ``layer_types`` other than
``linear_attention`` / ``full_attention``, a ``partial_rotary_factor`` whose rotated width ``int(head_dim *
factor)`` is odd, rope types other than ``default`` / ``linear`` / ``yarn``.
"""

from __future__ import annotations

from ..schedule import from_layer_types
from .fields import Fields, rope
from .mapping import Rule, Tie

MODEL_TYPES = ("qwen3_next",)

NAMES = {
    "d_model": "hidden_size",
    "n_heads": "num_attention_heads",
    "n_kv_heads": "num_key_value_heads",
    "n_layers": "num_hidden_layers",
    "vocab_size": "vocab_size",
    "max_len": "max_position_embeddings",
    "norm_eps": "rms_norm_eps",
    "rope_base": "rope_theta",
    "head_dim": "head_dim",
    "top_k": "num_experts_per_tok",
    "shared_d_ff": "shared_expert_intermediate_size",
    "delta_key_heads": "linear_num_key_heads",
    "delta_value_heads": "linear_num_value_heads",
    "delta_key_dim": "linear_key_head_dim",
    "delta_value_dim": "linear_value_head_dim",
    "delta_conv": "linear_conv_kernel_dim",
}  # catalogue field -> config.json key
SIZES = {
    "num_experts": (0, 512, "routed experts per MoE layer (0: every layer dense)"),
    "decoder_sparse_step": (1, 1 << 20, "every how many layers one is a mixture of experts"),
    "intermediate_size": (1, 1 << 18, "the hidden width of the dense layers"),
    "moe_intermediate_size": (1, 1 << 18, "each routed expert's hidden width"),
}
# Qwen3NextConfig's defaults for what a config.json may omit
DEFAULTS = dict(
    vocab_size=151936,
    hidden_size=2048,
    intermediate_size=5632,
    num_hidden_layers=48,
    num_attention_heads=16,
    num_key_value_heads=2,
    head_dim=256,
    max_position_embeddings=32768,
    rms_norm_eps=1e-6,
    linear_conv_kernel_dim=4,
    linear_key_head_dim=128,
    linear_value_head_dim=128,
    linear_num_key_heads=16,
    linear_num_value_heads=32,
    decoder_sparse_step=1,
    moe_intermediate_size=512,
    shared_expert_intermediate_size=512,
    num_experts_per_tok=10,
    num_experts=512,
    partial_rotary_factor=0.25,
)
LAYER_TYPES = {"linear_attention": "gated_deltanet", "full_attention": "full"}
FULL_EVERY = 4  # Qwen3NextConfig's default layer_types: every fourth layer full attention


def _layer_types(f: Fields, n_layers: int) -> list:
    types = f.hf.get("layer_types")
    if types is None:
        return ["full_attention" if (i + 1) % FULL_EVERY == 0 else "linear_attention" for i in range(n_layers)]
    if not isinstance(types, list) or len(types) != n_layers or not all(t in LAYER_TYPES for t in types):
        f.refuse("layer_types", str(types)[:80], f"one of {list(LAYER_TYPES)} per layer ({n_layers} layers)")
    return types


def _moe_layers(f: Fields, n_layers: int) -> set:
    if f.integer("num_experts", DEFAULTS["num_experts"], lo=0, hi=512) == 0:
        return set()
    only = f.hf.get("mlp_only_layers") or []
    if not isinstance(only, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in only):
        f.refuse("mlp_only_layers", str(only)[:80], "a list of layer indices")
    step = f.integer("decoder_sparse_step", DEFAULTS["decoder_sparse_step"], lo=1)
    return {i for i in range(n_layers) if i not in only and (i + 1) % step == 0}


def _partial(f: Fields, head_dim: int) -> tuple:
    """``(rope_fraction, Fields without the factor)``: the factor of ``rope_parameters`` (or the top level)."""
    params = f.hf.get("rope_parameters")
    hf = dict(f.hf)
    factor = hf.pop("partial_rotary_factor", None)
    if isinstance(params, dict):
        params = dict(params)
        factor = params.pop("partial_rotary_factor", factor)
        hf["rope_parameters"] = params
    factor = DEFAULTS["partial_rotary_factor"] if factor is None else factor
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not 0 < factor <= 1:
        f.refuse("partial_rotary_factor", factor, "a number in (0, 1]: the share of each head's dims RoPE rotates")
    if int(head_dim * factor) % 2:
        f.refuse(
            "partial_rotary_factor",
            factor,
            f"a factor whose rotated width int(head_dim * factor) = {int(head_dim * factor)} is even (RoPE pairs)",
        )
    return float(factor), Fields(hf, f.names)


def config(f: Fields) -> tuple:
    d = f.integer("hidden_size", DEFAULTS["hidden_size"], lo=1)
    heads = f.integer("num_attention_heads", DEFAULTS["num_attention_heads"], lo=1)
    kv = f.integer("num_key_value_heads", DEFAULTS["num_key_value_heads"], lo=1)
    n_layers = f.integer("num_hidden_layers", DEFAULTS["num_hidden_layers"], lo=1)
    act = f.text("hidden_act", "silu")
    if act != "silu":
        f.refuse("hidden_act", act, f"hidden_act {act!r} is not supported: 'silu' (SwiGLU, SiLU convolution)")
    if f.flag("attention_bias", False):
        f.refuse("attention_bias", True, "false (the catalogue's Gated DeltaNet layers have no biases)")
    head_dim = f.integer("head_dim", DEFAULTS["head_dim"], lo=1, hi=1 << 16)
    fraction, rope_fields = _partial(f, head_dim)
    types = _layer_types(f, n_layers)
    moe = _moe_layers(f, n_layers)
    mixed = 0 < len(moe) < n_layers
    tokens = [LAYER_TYPES[t] + (":dense" if mixed and i not in moe else "") for i, t in enumerate(types)]
    full = "full_attention" in types
    att = {"attention": "full" if full else "gated_deltanet"}
    if len(set(tokens)) > 1 or ":" in tokens[0]:
        att["layer_schedule"] = from_layer_types(tokens, {t: t for t in tokens})
    dense_ff = f.integer("intermediate_size", DEFAULTS["intermediate_size"], lo=1)
    if moe:
        ffn = dict(
            ffn="moe_qwen",
            n_experts=f.integer("num_experts", DEFAULTS["num_experts"], lo=1, hi=512),
            top_k=f.integer("num_experts_per_tok", DEFAULTS["num_experts_per_tok"], lo=1),
            d_ff=f.integer("moe_intermediate_size", DEFAULTS["moe_intermediate_size"], lo=1),
            shared_d_ff=f.integer("shared_expert_intermediate_size", DEFAULTS["shared_expert_intermediate_size"], lo=1),
            norm_topk_prob=f.flag("norm_topk_prob", True),
        )
        if mixed:
            ffn.update(dense_ffn="swiglu", dense_d_ff=dense_ff)
    else:
        ffn = dict(ffn="swiglu", d_ff=dense_ff)
    delta = dict(
        delta_key_heads=f.integer("linear_num_key_heads", DEFAULTS["linear_num_key_heads"], lo=1),
        delta_value_heads=f.integer("linear_num_value_heads", DEFAULTS["linear_num_value_heads"], lo=1),
        delta_key_dim=f.integer("linear_key_head_dim", DEFAULTS["linear_key_head_dim"], lo=1),
        delta_value_dim=f.integer("linear_value_head_dim", DEFAULTS["linear_value_head_dim"], lo=1),
        delta_conv=f.integer("linear_conv_kernel_dim", DEFAULTS["linear_conv_kernel_dim"], lo=1),
    )
    fields = dict(
        architecture="decoder_only",
        causal=True,
        position="rope",
        norm_placement="pre",
        norm="rmsnorm",
        attn_bias="none",
        vocab_size=f.integer("vocab_size", DEFAULTS["vocab_size"], lo=1),
        max_len=f.integer("max_position_embeddings", DEFAULTS["max_position_embeddings"], lo=1),
        n_layers=n_layers,
        d_model=d,
        n_heads=heads,
        n_kv_heads=kv,
        head_dim=None if d % heads == 0 and head_dim == d // heads else head_dim,
        norm_eps=f.number("rms_norm_eps", DEFAULTS["rms_norm_eps"]),
        qk_norm="head" if full else "none",
        attn_gate="elementwise" if full else "none",
        rope_fraction=fraction,
        **att,
        **ffn,
        **delta,
        **rope(rope_fields),
    )
    tied = f.flag("tie_word_embeddings", False)
    notes = [
        f"qwen3_next: {att.get('layer_schedule') or att['attention']} layers; Gated DeltaNet with "
        f"{delta['delta_key_heads']} key / {delta['delta_value_heads']} value heads; full attention with {kv} K/V "
        f"heads of {head_dim} for {heads} query heads, output gate (attn_gate='elementwise'), per-head q/k norm",
        "LM head tied to the token embedding" if tied else "separate LM head (lm_head.weight)",
        f"RoPE on {fraction:g} of each head's dims (rope_fraction)",
        "zero-centred RMSNorm weights (1 + w) read as gains; the Gated DeltaNet's gated norm as stored",
    ]
    if moe:
        notes.append(
            f"{ffn['n_experts']} SwiGLU experts (top {ffn['top_k']} of a softmax) + a sigmoid-gated shared expert "
            f"in {len(moe)} of {n_layers} layers (moe_qwen)"
        )
    return fields, notes


def _tied(f: Fields) -> bool:
    return f.flag("tie_word_embeddings", False)


def canonical(f: Fields, name: str):
    if name.startswith("mtp."):
        return None  # the multi-token-prediction module: transformers' causal LM never reads it
    name = name.removeprefix("model.")
    if name.endswith("rotary_emb.inv_freq") or (name == "lm_head.weight" and _tied(f)):
        return None  # a buffer recomputed from rope_theta; the tied head is the embedding
    return name


def _plus_one(t):
    return 1 + t


def _q_rows(d_head: int, part: int):
    """The query (``part`` 0) or gate (1) rows of the fused ``q_proj [h * 2 d_head, d]``: per head ``d_head`` query
    rows then ``d_head`` gate rows."""
    return lambda t: t.reshape(-1, 2, d_head, t.shape[-1])[:, part].reshape(-1, t.shape[-1])


def _expert(e: int, part: str):
    """Expert ``e``'s ``w`` (gate), ``v`` (up) or ``w2`` weight from transformers' in-memory fused layout
    ``gate_up_proj [E, 2 d_ff, d]`` (the gate's rows first) / ``down_proj [E, d, d_ff]``, both applied as
    ``F.linear``; the Hub's files hold one ``experts.{e}.{gate,up,down}_proj.weight`` per expert instead."""
    if part == "w":
        return lambda t: t[e, : t.shape[1] // 2]
    if part == "v":
        return lambda t: t[e, t.shape[1] // 2 :]
    return lambda t: t[e]


def rules(f: Fields, cfg) -> dict:
    out = {
        "embed.weight": Rule(("embed_tokens.weight",)),
        "final_norm.weight": Rule(("norm.weight",), _plus_one),
        "head.weight": Tie("embed.weight") if _tied(f) else Rule(("lm_head.weight",)),
    }
    fused = any(n.endswith("mlp.experts.gate_up_proj") for n in f.names)  # else the Hub's one tensor per expert
    for i in range(cfg.n_layers):
        src, dst = f"layers.{i}.", f"stack.blocks.{i}."
        layer = cfg.layer_config(i)
        out[dst + "res_attn.norm.weight"] = Rule((src + "input_layernorm.weight",), _plus_one)
        out[dst + "res_ffn.norm.weight"] = Rule((src + "post_attention_layernorm.weight",), _plus_one)
        if layer.attention == "gated_deltanet":
            lin = src + "linear_attn."
            for name in ("in_proj_qkvz", "in_proj_ba", "conv1d", "norm"):
                out[dst + f"attn.core.{name}.weight"] = Rule((lin + f"{name}.weight",))
            for name in ("dt_bias", "A_log"):
                out[dst + f"attn.core.{name}"] = Rule((lin + name,))
            out[dst + "attn.out_proj.weight"] = Rule((lin + "out_proj.weight",))
        else:
            att = src + "self_attn."
            out[dst + "attn.q_proj.weight"] = Rule((att + "q_proj.weight",), _q_rows(layer.d_head, 0))
            out[dst + "attn.gate_proj.weight"] = Rule((att + "q_proj.weight",), _q_rows(layer.d_head, 1))
            for proj, mine in (("k_proj", "k_proj"), ("v_proj", "v_proj"), ("o_proj", "out_proj")):
                out[dst + f"attn.{mine}.weight"] = Rule((att + f"{proj}.weight",))
            for norm in ("q_norm", "k_norm"):
                out[dst + f"attn.{norm}.weight"] = Rule((att + f"{norm}.weight",), _plus_one)
        mlp = src + "mlp."
        if layer.ffn == "moe_qwen":
            out[dst + "ffn.router.weight"] = Rule((mlp + "gate.weight",))
            for e in range(cfg.n_experts):
                for mine, theirs in (("w", "gate_proj"), ("v", "up_proj"), ("w2", "down_proj")):
                    if fused:
                        fused_name = "experts.down_proj" if mine == "w2" else "experts.gate_up_proj"
                        out[dst + f"ffn.experts.{e}.{mine}.weight"] = Rule((mlp + fused_name,), _expert(e, mine))
                    else:
                        out[dst + f"ffn.experts.{e}.{mine}.weight"] = Rule((mlp + f"experts.{e}.{theirs}.weight",))
            for mine, theirs in (("w", "gate_proj"), ("v", "up_proj"), ("w2", "down_proj")):
                out[dst + f"ffn.shared.{mine}.weight"] = Rule((mlp + f"shared_expert.{theirs}.weight",))
            out[dst + "ffn.shared_gate.weight"] = Rule((mlp + "shared_expert_gate.weight",))
        else:
            for mine, theirs in (("w", "gate_proj"), ("v", "up_proj"), ("w2", "down_proj")):
                out[dst + f"ffn.{mine}.weight"] = Rule((mlp + f"{theirs}.weight",))
    return out
