"""Llama-style decoders: Llama (and SmolLM, which is a Llama), Mistral, Qwen2.

Catalogue choices: decoder-only, causal, ``rope`` (``rope_theta`` -> ``rope_base``; linear
``rope_scaling`` -> ``rope_scale``; any other scaling refused by name), pre-norm ``rmsnorm``
(``rms_norm_eps``) with a final norm, ``swiglu`` FFN of width ``intermediate_size`` (gate_proj is
the Swish branch, up_proj the linear one), ``num_key_value_heads`` K/V heads (GQA), attention
``sliding_window`` with ``window = sliding_window`` when every layer slides (Mistral; Qwen2 with
``use_sliding_window`` and ``max_window_layers = 0``), and a ``layer_schedule`` of ``full`` and
``sliding_window`` layers when only some slide (transformers' ``layer_types``; Qwen2's layers from
``max_window_layers`` on), ``head_dim`` -> ``head_dim`` (a head width apart from ``hidden_size /
num_attention_heads``: q, k, v project to ``heads * head_dim``, o_proj reads it back), q/k/v biases for
Qwen2 (``attn_bias="qkv"``) and Llama's
``attention_bias`` (``"all"``), LM head tied to the embedding when ``tie_word_embeddings``.
"""

from __future__ import annotations

from ..schedule import from_layer_types
from .fields import Fields, rope
from .mapping import Rule, Tie

MODEL_TYPES = ("llama", "mistral", "qwen2")

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
}  # catalogue field -> config.json key
# sizes read without a catalogue field (models.hf.sizes checks them before this module reads the config)
SIZES = {
    "max_window_layers": (0, 1 << 20, "the first layer of Qwen2's sliding window; layers before it are full"),
}


# transformers' layer kinds -> the catalogue's attention keys
LAYER_TYPES = {"full_attention": "full", "sliding_attention": "sliding_window"}


def _layer_types(f: Fields, n_layers: int) -> list:
    """The kind of each layer: ``layer_types`` when the config lists them (transformers 5), else Qwen2's
    ``use_sliding_window`` / ``max_window_layers`` (layers ``i >= max_window_layers`` slide, as transformers
    derives them), else Mistral's: every layer slides when ``sliding_window`` is set."""
    model_type = f.hf.get("model_type")
    window = f.hf.get("sliding_window")
    types = f.hf.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != n_layers or not all(t in LAYER_TYPES for t in types):
            f.refuse("layer_types", str(types)[:80], f"one of {list(LAYER_TYPES)} per layer ({n_layers} layers)")
        return types
    if model_type in ("qwen2", "qwen3"):
        if not f.flag("use_sliding_window", False) or window is None:
            return ["full_attention"] * n_layers
        first = min(f.integer("max_window_layers", 28, lo=0, hi=1 << 20), n_layers)
        return ["full_attention"] * first + ["sliding_attention"] * (n_layers - first)
    return ["full_attention" if window is None else "sliding_attention"] * n_layers


def _attention(f: Fields, n_layers: int) -> dict:
    """The attention fields: ``full``, ``sliding_window`` in every layer, or a layer schedule of both
    (``models.schedule``: the shortest period of the layer kinds, run-length encoded) whose ``attention`` is
    layer 0's."""
    types = _layer_types(f, n_layers)
    kinds = set(types)
    if kinds == {"full_attention"}:
        return {"attention": "full"}
    out = {"attention": LAYER_TYPES[types[0]], "window": f.integer("sliding_window", lo=1, hi=1 << 20)}
    if len(kinds) > 1:
        out["layer_schedule"] = from_layer_types(types, LAYER_TYPES)
    return out


def config(f: Fields, windowed: bool = True, head_dim: int | None = None) -> tuple:
    """``(ModelConfig fields, notes)``; ``windowed=False`` for a family whose model reads no ``sliding_window``
    (OLMo 2: transformers' model attends in full whatever the key says); ``head_dim``: the family's head width
    when config.json has no ``head_dim`` (None: ``hidden_size / num_attention_heads``; Qwen3's config class: 128)."""
    model_type = f.text("model_type")
    d, heads = f.integer("hidden_size", lo=1), f.integer("num_attention_heads", lo=1)
    kv = f.integer("num_key_value_heads", heads, lo=1)
    n_layers = f.integer("num_hidden_layers", lo=1)
    act = f.text("hidden_act", "silu")
    if act != "silu":
        f.refuse("hidden_act", act, f"hidden_act {act!r} is not supported: 'silu' (SwiGLU)")
    head_dim = f.integer("head_dim", head_dim, lo=1, hi=1 << 16) if f.hf.get("head_dim") is not None else head_dim
    if head_dim is not None and heads and d % heads == 0 and head_dim == d // heads:
        head_dim = None  # the catalogue's default width: the same model, spelled as every catalogue config
    if f.hf.get("mlp_bias", False) is not False:
        f.refuse("mlp_bias", f.hf.get("mlp_bias"), "false (the catalogue's SwiGLU has no biases)")
    bias = "qkv" if model_type == "qwen2" else ("all" if f.flag("attention_bias", False) else "none")
    attention = _attention(f, n_layers) if windowed else {"attention": "full"}
    tied = f.flag("tie_word_embeddings", False)
    notes = [
        f"{model_type}: RoPE, RMSNorm, SwiGLU, {kv} K/V heads for {heads} query heads",
        "LM head tied to the token embedding" if tied else "separate LM head (lm_head.weight)",
    ]
    if head_dim is not None:
        notes.append(f"heads of {head_dim} numbers (head_dim), not hidden_size / num_attention_heads")
    if "layer_schedule" in attention:
        notes.append(f"sliding window of {attention['window']} keys in some layers: {attention['layer_schedule']}")
    elif "window" in attention:
        notes.append(f"sliding window of {attention['window']} keys in every layer")
    fields = dict(
        architecture="decoder_only",
        causal=True,
        position="rope",
        norm_placement="pre",
        norm="rmsnorm",
        ffn="swiglu",
        attn_bias=bias,
        vocab_size=f.integer("vocab_size", lo=1),
        max_len=f.integer("max_position_embeddings", 2048, lo=1),
        n_layers=n_layers,
        d_model=d,
        n_heads=heads,
        n_kv_heads=kv,
        head_dim=head_dim,
        d_ff=f.integer("intermediate_size", lo=1),
        norm_eps=f.number("rms_norm_eps", 1e-6),
        **rope(f),
    )
    return {**fields, **attention}, notes


def _tied(f: Fields) -> bool:
    return f.flag("tie_word_embeddings", False)


def canonical(f: Fields, name: str):
    name = name.removeprefix("model.")
    if name.endswith("rotary_emb.inv_freq") or (name == "lm_head.weight" and _tied(f)):
        return None  # a buffer recomputed from rope_theta; the tied head is the embedding
    return name


def rules(f: Fields, cfg) -> dict:
    out = {
        "embed.weight": Rule(("embed_tokens.weight",)),
        "final_norm.weight": Rule(("norm.weight",)),
        "head.weight": Tie("embed.weight") if _tied(f) else Rule(("lm_head.weight",)),
    }
    bias = cfg.attn_bias
    for i in range(cfg.n_layers):
        src, dst = f"layers.{i}.", f"stack.blocks.{i}."
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            mine = "out_proj" if proj == "o_proj" else proj
            out[dst + f"attn.{mine}.weight"] = Rule((src + f"self_attn.{proj}.weight",))
            if bias == "all" or (bias == "qkv" and proj != "o_proj"):
                out[dst + f"attn.{mine}.bias"] = Rule((src + f"self_attn.{proj}.bias",))
        out[dst + "res_attn.norm.weight"] = Rule((src + "input_layernorm.weight",))
        out[dst + "res_ffn.norm.weight"] = Rule((src + "post_attention_layernorm.weight",))
        out[dst + "ffn.w.weight"] = Rule((src + "mlp.gate_proj.weight",))
        out[dst + "ffn.v.weight"] = Rule((src + "mlp.up_proj.weight",))
        out[dst + "ffn.w2.weight"] = Rule((src + "mlp.down_proj.weight",))
    return out
