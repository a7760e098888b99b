"""gpt-oss (OpenAI 2025, "gpt-oss-120b & gpt-oss-20b Model Card"; transformers' ``GptOssForCausalLM``): a
pre-norm decoder of alternating sliding-window and full layers with learned attention sinks, YaRN-scaled RoPE
and a mixture of clamped-SwiGLU experts in every layer.

Catalogue choices (defaults: transformers' ``GptOssConfig`` where config.json omits a key):

- decoder-only, causal, pre-norm ``rmsnorm`` (``rms_norm_eps``, 1e-5; ``input_layernorm`` before attention,
  ``post_attention_layernorm`` before the MoE, the final ``norm``), separate LM head (``tie_word_embeddings``
  false; true ties it).
- attention: ``num_attention_heads`` query heads and ``num_key_value_heads`` (8) K/V heads of ``head_dim`` (64),
  scores scaled by ``head_dim ** -0.5``; ``attention_bias`` (true) -> biases on q, k, v and o (``attn_bias="all"``);
  ``self_attn.sinks`` -> ``attn_sinks`` (one logit per query head in the softmax's denominator, no value,
  ``models/sinks.py``: transformers' eager convention).
- ``layer_types`` (absent: sliding, full, sliding, ...) -> a ``layer_schedule`` of ``sliding_window`` and
  ``full`` with ``window = sliding_window`` (128): transformers' sliding mask lets query ``q`` see keys
  ``q - sliding_window < k <= q`` (``sliding_window`` keys counting its own), the catalogue's window.
- ``rope``: ``rope_parameters`` / ``rope_scaling`` + ``rope_theta`` (150000) read by ``models.hf.fields.rope``;
  absent, ``GptOssConfig``'s YaRN (factor 32, beta_fast 32, beta_slow 1, original context 4096, truncate false)
  -> the ``yarn_*`` fields (``models/positions/yarn.py``: angles and the attention factor on cos / sin).
- ``mlp`` -> ``moe_swiglu_clamped`` (``models/ffn/moe_clamped.py``) with ``n_experts = num_local_experts``,
  ``top_k = num_experts_per_tok``, ``d_ff = intermediate_size``, ``swiglu_alpha`` / ``swiglu_limit``; tensors one to
  one (``mlp.router.weight`` / ``bias``, ``mlp.experts.gate_up_proj`` ``[E, d, 2f]`` interleaved gate / up,
  ``gate_up_proj_bias``, ``down_proj``, ``down_proj_bias``). ``hidden_act`` is not read by transformers' experts
  (their activation is the clamped SwiGLU), so it is not read here either.

Refused by name: a ``quantization_config`` (the released checkpoints store the experts in MXFP4 blocks and
scales, which this reader does not dequantize), a RoPE scaling other than none / linear / YaRN, partial rotation,
layer kinds other than full and sliding. ``router_aux_loss_coef`` / ``output_router_logits`` concern training
only (the logits do not depend on them) and are ignored.
"""

from __future__ import annotations

from ..schedule import from_layer_types
from .fields import Fields, rope
from .mapping import Rule, Tie

MODEL_TYPES = ("gpt_oss",)

NAMES = {
    "d_model": "hidden_size",
    "n_heads": "num_attention_heads",
    "n_kv_heads": "num_key_value_heads",
    "n_layers": "num_hidden_layers",
    "d_ff": "intermediate_size",
    "vocab_size": "vocab_size",
    "max_len": "max_position_embeddings",
    "norm_eps": "rms_norm_eps",
    "window": "sliding_window",
    "rope_base": "rope_theta",
    "rope_scale": "rope_scaling",
    "head_dim": "head_dim",
    "n_experts": "num_local_experts",
    "top_k": "num_experts_per_tok",
    "swiglu_alpha": "swiglu_alpha",
    "swiglu_limit": "swiglu_limit",
    "yarn_factor": "rope_scaling",  # (not an integer: models.hf.sizes does not read it)
    "yarn_beta_fast": "rope_scaling",
    "yarn_attention_factor": "rope_scaling",
}  # catalogue field -> config.json key
SIZES = {}
LAYER_TYPES = {"full_attention": "full", "sliding_attention": "sliding_window"}
# GptOssConfig's defaults for what config.json may omit
DEFAULTS = dict(
    num_hidden_layers=36,
    num_local_experts=128,
    vocab_size=201088,
    hidden_size=2880,
    intermediate_size=2880,
    head_dim=64,
    num_attention_heads=64,
    num_key_value_heads=8,
    sliding_window=128,
    max_position_embeddings=131072,
    rms_norm_eps=1e-5,
    num_experts_per_tok=4,
    swiglu_alpha=1.702,
    swiglu_limit=7.0,
)
THETA = 150000.0  # GptOssConfig.default_theta
YARN = {
    "rope_type": "yarn",
    "factor": 32.0,
    "beta_fast": 32.0,
    "beta_slow": 1.0,
    "truncate": False,
    "original_max_position_embeddings": 4096,
}  # GptOssConfig's rope_parameters when config.json has none


def layer_types(f: Fields, n_layers: int) -> list:
    types = f.hf.get("layer_types")
    if types is None:
        return ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(n_layers)]
    if not isinstance(types, list) or len(types) != n_layers or not all(t in LAYER_TYPES for t in types):
        f.refuse("layer_types", str(types)[:80], f"one of {list(LAYER_TYPES)} per layer ({n_layers} layers)")
    return types


def attention(f: Fields, types: list) -> dict:
    """``attention`` (layer 0's kind), ``window`` when a layer slides, and the ``layer_schedule`` when kinds mix."""
    kinds = set(types)
    if kinds == {"full_attention"}:
        return {"attention": "full"}
    if "sliding_window" in f.hf and f.hf["sliding_window"] is None:
        f.refuse("sliding_window", None, "a number of keys (layer_types has sliding layers)")
    out = {
        "attention": LAYER_TYPES[types[0]],
        "window": f.integer("sliding_window", DEFAULTS["sliding_window"], lo=1, hi=1 << 20),
    }
    if len(kinds) > 1:
        out["layer_schedule"] = from_layer_types(types, LAYER_TYPES)
    return out


def config(f: Fields) -> tuple:
    if f.hf.get("quantization_config") is not None:
        method = f.hf["quantization_config"]
        method = method.get("quant_method", "?") if isinstance(method, dict) else str(method)[:40]
        f.refuse(
            "quantization_config",
            method,
            "absent: a quantized checkpoint (gpt-oss is released with MXFP4 experts) is not supported; "
            "use a dequantized (bfloat16 / float32) copy",
        )

    def size(key, lo=1, hi=1 << 20):
        return f.integer(key, DEFAULTS[key], lo=lo, hi=hi)

    d, heads, n_layers = size("hidden_size"), size("num_attention_heads"), size("num_hidden_layers")
    kv = size("num_key_value_heads")
    head_dim = f.integer("head_dim", d // heads, lo=1, hi=1 << 16) if "head_dim" in f.hf else DEFAULTS["head_dim"]
    if d % heads == 0 and head_dim == d // heads:
        head_dim = None  # the catalogue's default width
    tied = f.flag("tie_word_embeddings", False)
    att = attention(f, layer_types(f, n_layers))
    experts, k = size("num_local_experts"), size("num_experts_per_tok")
    fields = dict(
        architecture="decoder_only",
        causal=True,
        position="rope",
        norm_placement="pre",
        norm="rmsnorm",
        ffn="moe_swiglu_clamped",
        attn_bias="all" if f.flag("attention_bias", True) else "none",
        attn_sinks=True,
        vocab_size=size("vocab_size"),
        max_len=size("max_position_embeddings"),
        n_layers=n_layers,
        d_model=d,
        n_heads=heads,
        n_kv_heads=kv,
        head_dim=head_dim,
        d_ff=size("intermediate_size"),
        norm_eps=f.number("rms_norm_eps", DEFAULTS["rms_norm_eps"]),
        n_experts=experts,
        top_k=k,
        swiglu_alpha=f.number("swiglu_alpha", DEFAULTS["swiglu_alpha"]),
        swiglu_limit=f.number("swiglu_limit", DEFAULTS["swiglu_limit"]),
        **rope(f, theta=THETA, scaling=YARN),
        **att,
    )
    notes = [
        f"gpt_oss: RoPE, pre-norm RMSNorm, learned attention sinks, {kv} K/V heads of {head_dim or d // heads} "
        f"for {heads} query heads",
        f"mixture of {experts} clamped-SwiGLU experts, top {k} (moe_swiglu_clamped)",
        "LM head tied to the token embedding" if tied else "separate LM head (lm_head.weight)",
    ]
    if fields.get("yarn_factor") is not None:
        notes.append(
            f"YaRN RoPE: factor {fields['yarn_factor']:g} over an original context of "
            f"{fields['yarn_original_max_len']} positions"
        )
    if "layer_schedule" in att:
        notes.append(f"sliding window of {att['window']} keys in some layers: {att['layer_schedule']}")
    elif "window" in att:
        notes.append(f"sliding window of {att['window']} keys in every layer")
    return fields, notes


def _tied(f: Fields) -> bool:
    return f.flag("tie_word_embeddings", False)


def canonical(f: Fields, name: str):
    name = name.removeprefix("model.")
    if name.endswith("rotary_emb.inv_freq") or (name == "lm_head.weight" and _tied(f)):
        return None  # a buffer recomputed from the RoPE settings; the tied head is the embedding
    return name


def rules(f: Fields, cfg) -> dict:
    out = {
        "embed.weight": Rule(("embed_tokens.weight",)),
        "final_norm.weight": Rule(("norm.weight",)),
        "head.weight": Tie("embed.weight") if _tied(f) else Rule(("lm_head.weight",)),
    }
    for i in range(cfg.n_layers):
        src, dst = f"layers.{i}.", f"stack.blocks.{i}."
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            mine = "out_proj" if proj == "o_proj" else proj
            out[dst + f"attn.{mine}.weight"] = Rule((src + f"self_attn.{proj}.weight",))
            if cfg.attn_bias == "all":
                out[dst + f"attn.{mine}.bias"] = Rule((src + f"self_attn.{proj}.bias",))
        out[dst + "attn.sinks"] = Rule((src + "self_attn.sinks",))
        out[dst + "res_attn.norm.weight"] = Rule((src + "input_layernorm.weight",))
        out[dst + "res_ffn.norm.weight"] = Rule((src + "post_attention_layernorm.weight",))
        out[dst + "ffn.router.weight"] = Rule((src + "mlp.router.weight",))
        out[dst + "ffn.router.bias"] = Rule((src + "mlp.router.bias",))
        for name in ("gate_up_proj", "gate_up_proj_bias", "down_proj", "down_proj_bias"):
            out[dst + f"ffn.experts.{name}"] = Rule((src + f"mlp.experts.{name}",))
    return out
