"""Gemma 2 (Gemma Team 2024, "Gemma 2: Improving Open Language Models at a Practical Size"): a decoder of
alternating sliding-window and full layers, four norms per layer, soft-capped attention and output logits.

Catalogue choices: decoder-only, causal, ``rope`` (``rope_theta`` / ``rope_parameters`` -> ``rope_base``; scaling
read and refused as for Llama, ``models.hf.fields.rope``), ``rmsnorm`` (``rms_norm_eps``) in the ``sandwich``
placement, ``x + Norm2(F(Norm1(x)))``: ``input_layernorm`` / ``post_attention_layernorm`` around attention (the
second on the attention output, before the residual add), ``pre_feedforward_layernorm`` /
``post_feedforward_layernorm`` around the MLP, and the final ``norm``; ``geglu`` FFN with ``gelu_approx="tanh"``
(``hidden_activation`` ``gelu_pytorch_tanh``; ``gate_proj`` is the GELU branch, ``up_proj`` the linear one) of
width ``intermediate_size``; ``num_key_value_heads`` K/V heads of ``head_dim`` (default 256, transformers'
``Gemma2Config``); ``attention_bias`` -> biases on q, k, v and o (``attn_bias="all"``); the tied head
(``tie_word_embeddings``, default true).

Per layer, ``layer_types`` (absent: sliding, full, sliding, ... as ``Gemma2Config`` derives them) -> a
``layer_schedule`` of ``sliding_window`` and ``full`` with ``window = sliding_window``: transformers' mask lets
a query see the keys ``q - sliding_window < k <= q``, ``sliding_window`` keys counting its own, which is the
catalogue's window. Gemma's terms:

- ``embed_scale``: the embeddings times ``sqrt(hidden_size)`` (rounded to the embedding's dtype).
- RMSNorm ``x / rms(x) * (1 + w)`` with ``w`` stored (zeros at init): read as the catalogue's gain ``g = 1 + w``,
  computed in float32, the same function (the exporter writes ``w = g - 1``).
- ``attn_logit_softcapping`` -> ``softcap`` (scores ``c * tanh(s / c)`` after the scale, before the mask);
  ``final_logit_softcapping`` -> ``final_softcap`` (the logits ``c * tanh(z / c)``). Null: no cap.
- Scores scale by ``query_pre_attn_scalar ** -0.5``: the catalogue scales by ``head_dim ** -0.5``, so any
  other ``query_pre_attn_scalar`` is refused by name (Gemma 2 2B / 9B and every Gemma 3 set it to ``head_dim``;
  27B's 144 with heads of 128 is refused).
"""

from __future__ import annotations

from ..schedule import from_layer_types
from .fields import Fields, rope
from .mapping import Rule, Tie

MODEL_TYPES = ("gemma2",)

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
    "softcap": "attn_logit_softcapping",
    "final_softcap": "final_logit_softcapping",
}  # catalogue field -> config.json key
SIZES = {
    "query_pre_attn_scalar": (1, 1 << 16, "the attention scale's denominator squared; must equal head_dim"),
}
HEAD_DIM = 256  # Gemma2Config / Gemma3TextConfig's head_dim when config.json has none
PERIOD = 2  # Gemma2Config's layer_types when config.json has none: every second layer full
LAYER_TYPES = {"full_attention": "full", "sliding_attention": "sliding_window"}
ACTIVATIONS = ("gelu_pytorch_tanh", "gelu_tanh")  # GELU's tanh approximation (transformers' names)


def layer_types(f: Fields, n_layers: int, period: int) -> list:
    """Each layer's kind: ``layer_types`` when config.json lists them, else ``Gemma2Config`` /
    ``Gemma3TextConfig``'s default: layer ``i`` full when ``(i + 1) % period == 0``, sliding otherwise."""
    types = f.hf.get("layer_types")
    if types is None:
        return ["sliding_attention" if (i + 1) % period else "full_attention" for i in range(n_layers)]
    if not isinstance(types, list) or len(types) != n_layers or not all(t in LAYER_TYPES for t in types):
        f.refuse("layer_types", str(types)[:80], f"one of {list(LAYER_TYPES)} per layer ({n_layers} layers)")
    return types


def attention(f: Fields, types: list) -> dict:
    """``attention`` (layer 0's kind), ``window`` when a layer slides, and the ``layer_schedule`` when kinds mix."""
    kinds = set(types)
    if kinds == {"full_attention"}:
        return {"attention": "full"}
    out = {"attention": LAYER_TYPES[types[0]], "window": f.integer("sliding_window", lo=1, hi=1 << 20)}
    if len(kinds) > 1:
        out["layer_schedule"] = from_layer_types(types, LAYER_TYPES)
    return out


def _cap(f: Fields, key: str, default):
    """A soft cap (``attn_logit_softcapping`` / ``final_logit_softcapping``): null -> None, else a positive number."""
    if (key in f.hf and f.hf[key] is None) or (key not in f.hf and default is None):
        return None
    value = f.number(key, default)
    if not value > 0:
        f.refuse(key, value, "null (no cap) or a positive number")
    return value


def common(f: Fields, caps: tuple) -> tuple:
    """The fields and notes Gemma 2 and Gemma 3 share (everything but positions and the query/key norm);
    ``caps``: the config class's default ``(attn_logit_softcapping, final_logit_softcapping)``."""
    model_type = f.text("model_type")
    d, heads = f.integer("hidden_size", lo=1), f.integer("num_attention_heads", lo=1)
    kv = f.integer("num_key_value_heads", heads, lo=1)
    act = f.hf.get("hidden_activation", f.hf.get("hidden_act", "gelu_pytorch_tanh"))
    if act not in ACTIVATIONS:
        f.refuse("hidden_activation", act, f"one of {list(ACTIVATIONS)} (GeGLU with GELU's tanh approximation)")
    head_dim = f.integer("head_dim", HEAD_DIM, lo=1, hi=1 << 16)
    scalar = f.integer("query_pre_attn_scalar", HEAD_DIM, lo=1, hi=1 << 16)
    if scalar != head_dim:
        f.refuse(
            "query_pre_attn_scalar",
            scalar,
            f"head_dim={head_dim} (the catalogue scales scores by head_dim ** -0.5; another scale is not supported)",
        )
    attn_cap, final_cap = _cap(f, "attn_logit_softcapping", caps[0]), _cap(f, "final_logit_softcapping", caps[1])
    tied = f.flag("tie_word_embeddings", True)
    notes = [
        f"{model_type}: RoPE, RMSNorm before and after each sublayer (sandwich), GeGLU (tanh GELU), "
        f"{kv} K/V heads of {head_dim} for {heads} query heads",
        "LM head tied to the token embedding" if tied else "separate LM head (lm_head.weight)",
        "embeddings times sqrt(hidden_size) (embed_scale); RMSNorm gains stored as 1 + w, read as the gain",
    ]
    if attn_cap is not None:
        notes.append(f"attention scores soft-capped at {attn_cap:g} (softcap)")
    if final_cap is not None:
        notes.append(f"logits soft-capped at {final_cap:g} (final_softcap)")
    fields = dict(
        architecture="decoder_only",
        causal=True,
        position="rope",
        norm_placement="sandwich",
        norm="rmsnorm",
        ffn="geglu",
        gelu_approx="tanh",
        attn_bias="all" if f.flag("attention_bias", False) else "none",
        vocab_size=f.integer("vocab_size", lo=1),
        max_len=f.integer("max_position_embeddings", 8192, lo=1),
        n_layers=f.integer("num_hidden_layers", lo=1),
        d_model=d,
        n_heads=heads,
        n_kv_heads=kv,
        head_dim=None if d % heads == 0 and head_dim == d // heads else head_dim,
        d_ff=f.integer("intermediate_size", lo=1),
        norm_eps=f.number("rms_norm_eps", 1e-6),
        embed_scale=True,
        softcap=attn_cap,
        final_softcap=final_cap,
    )
    return fields, notes


def window_note(fields: dict) -> list:
    if "layer_schedule" in fields:
        return [f"sliding window of {fields['window']} keys in some layers: {fields['layer_schedule']}"]
    return [f"sliding window of {fields['window']} keys in every layer"] if "window" in fields else []


def config(f: Fields) -> tuple:
    fields, notes = common(f, caps=(50.0, 30.0))
    att = attention(f, layer_types(f, fields["n_layers"], PERIOD))
    return {**fields, **att, **rope(f)}, notes + window_note(att)


def _tied(f: Fields) -> bool:
    return f.flag("tie_word_embeddings", True)


def canonical(f: Fields, name: str):
    name = name.removeprefix("model.")
    if name.endswith("rotary_emb.inv_freq") or (name == "lm_head.weight" and _tied(f)):
        return None  # a buffer recomputed from rope_theta; the tied head is the embedding
    return name


def gain(w):
    """Gemma's RMSNorm multiplies by ``1 + w``: the catalogue's gain (float32 here, as Gemma computes it)."""
    return 1.0 + w


def rules(f: Fields, cfg) -> dict:
    out = {
        "embed.weight": Rule(("embed_tokens.weight",)),
        "final_norm.weight": Rule(("norm.weight",), gain),
        "head.weight": Tie("embed.weight") if _tied(f) else Rule(("lm_head.weight",)),
    }
    norms = {
        "res_attn.norm_in": "input_layernorm",
        "res_attn.norm_out": "post_attention_layernorm",
        "res_ffn.norm_in": "pre_feedforward_layernorm",
        "res_ffn.norm_out": "post_feedforward_layernorm",
    }
    for i in range(cfg.n_layers):
        src, dst = f"layers.{i}.", f"stack.blocks.{i}."
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            mine = "out_proj" if proj == "o_proj" else proj
            out[dst + f"attn.{mine}.weight"] = Rule((src + f"self_attn.{proj}.weight",))
            if cfg.attn_bias == "all":
                out[dst + f"attn.{mine}.bias"] = Rule((src + f"self_attn.{proj}.bias",))
        for mine, theirs in norms.items():
            out[dst + mine + ".weight"] = Rule((src + theirs + ".weight",), gain)
        out[dst + "ffn.w.weight"] = Rule((src + "mlp.gate_proj.weight",))
        out[dst + "ffn.v.weight"] = Rule((src + "mlp.up_proj.weight",))
        out[dst + "ffn.w2.weight"] = Rule((src + "mlp.down_proj.weight",))
    return out
