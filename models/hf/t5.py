"""T5 (Raffel et al. 2020): ``T5ForConditionalGeneration`` checkpoints (T5 v1.0 and v1.1 / Flan-T5 FFNs).

Catalogue choices: encoder-decoder (``num_layers`` / ``num_decoder_layers``), full attention, ``t5``
relative buckets (``relative_attention_num_buckets``, ``relative_attention_max_distance``; one table
per stack, read from its first block as T5 does), pre-norm ``rmsnorm`` (T5's LayerNorm has no mean
and no bias; ``layer_norm_epsilon``), one shared token embedding. FFN: ``relu`` / ``gelu`` (T5's
dense FFN has no biases: the catalogue's are zero) or ``geglu`` (tanh GELU, ``gated-gelu``) /
``swiglu`` (``gated-silu``). T5 does not divide scores by sqrt(d_kv): q is multiplied by sqrt(d_kv)
(the same scores). With tied embeddings T5 scales the decoder output by d_model^-0.5 before the
head: the head is the embedding times d_model^-0.5 (the same logits).
"""

from __future__ import annotations

import math

from .fields import Fields
from .mapping import Rule, Tie, Zeros

MODEL_TYPES = ("t5",)
FFNS = {
    "relu": ("relu", "none"),
    "gelu": ("gelu", "none"),
    "gated-gelu": ("geglu", "tanh"),
    "gated-gelu_new": ("geglu", "tanh"),
    "gated-silu": ("swiglu", "none"),
}

NAMES = {
    "d_model": "d_model",
    "n_heads": "num_heads",
    "n_layers": "num_layers",
    "n_encoder_layers": "num_layers",
    "n_decoder_layers": "num_decoder_layers",
    "d_ff": "d_ff",
    "vocab_size": "vocab_size",
    "norm_eps": "layer_norm_epsilon",
    "t5_num_buckets": "relative_attention_num_buckets",
    "t5_max_distance": "relative_attention_max_distance",
}  # catalogue field -> config.json key
SIZES = {"d_kv": (1, 1 << 16, "the width of one head, the catalogue's d_model / n_heads")}  # models.hf.sizes


def _head(f: Fields) -> str:
    """'scaled' (embedding * d^-0.5: T5 v1.0, tied), 'lm_head' (its own weight, unscaled: v1.1) or 'tied'
    (the embedding itself, unscaled). transformers 5 writes ``scale_decoder_outputs``; older configs say
    it with ``tie_word_embeddings``."""
    scale = f.hf.get("scale_decoder_outputs", f.hf.get("tie_word_embeddings", True) is not False)
    if scale is True:
        return "scaled"
    return "lm_head" if "lm_head.weight" in f.names else "tied"


def config(f: Fields) -> tuple:
    d, heads, d_kv = f.integer("d_model", lo=1), f.integer("num_heads", lo=1), f.integer("d_kv", lo=1)
    if d_kv * heads != d:
        f.refuse("d_kv", d_kv, f"d_model / num_heads = {d / heads:g} (T5 heads of another width are not supported)")
    proj = f.text("feed_forward_proj", "relu")
    if proj not in FFNS:
        f.refuse("feed_forward_proj", proj, f"hidden_act {proj!r} is not supported: one of {sorted(FFNS)}")
    ffn, approx = FFNS[proj]
    n_enc = f.integer("num_layers", lo=1)
    notes = [
        "one shared token embedding",
        "T5 scores are not divided by sqrt(d_kv): q multiplied by sqrt(d_kv)",
        {
            "lm_head": "separate LM head (lm_head.weight)",
            "scaled": "LM head = embedding * d_model^-0.5",
            "tied": "LM head tied to the token embedding",
        }[_head(f)],
    ]
    if ffn in ("relu", "gelu"):
        notes.append("T5's dense FFN has no biases: the catalogue's FFN biases are zero")
    return dict(
        architecture="encoder_decoder",
        causal=True,
        attention="full",
        position="t5",
        norm_placement="pre",
        norm="rmsnorm",
        ffn=ffn,
        gelu_approx=approx,
        vocab_size=f.integer("vocab_size", lo=1),
        n_layers=n_enc,
        n_encoder_layers=n_enc,
        n_decoder_layers=f.integer("num_decoder_layers", n_enc, lo=1),
        d_model=d,
        n_heads=heads,
        d_ff=f.integer("d_ff", lo=1),
        norm_eps=f.number("layer_norm_epsilon", 1e-6),
        t5_num_buckets=f.integer("relative_attention_num_buckets", 32, lo=1),
        t5_max_distance=f.integer("relative_attention_max_distance", 128, lo=1),
    ), notes


def canonical(f: Fields, name: str):
    if name in ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight"):
        return None  # copies of shared.weight
    if name == "lm_head.weight" and _head(f) != "lm_head":
        return None
    return name


def _attention(out, src, dst, scale):
    for mine, theirs in (("q_proj", "q"), ("k_proj", "k"), ("v_proj", "v"), ("out_proj", "o")):
        c = scale if mine == "q_proj" else 1.0
        out[f"{dst}.{mine}.weight"] = Rule((f"{src}.{theirs}.weight",), lambda w, c=c: w * c)


def _ffn(out, cfg, src, dst):
    if cfg.ffn in ("relu", "gelu"):
        out[dst + "ffn.w1.weight"] = Rule((src + "DenseReluDense.wi.weight",))
        out[dst + "ffn.w1.bias"] = Zeros()
        out[dst + "ffn.w2.bias"] = Zeros()
    else:
        out[dst + "ffn.w.weight"] = Rule((src + "DenseReluDense.wi_0.weight",))
        out[dst + "ffn.v.weight"] = Rule((src + "DenseReluDense.wi_1.weight",))
    out[dst + "ffn.w2.weight"] = Rule((src + "DenseReluDense.wo.weight",))
    out[dst + "res_ffn.norm.weight"] = Rule((src + "layer_norm.weight",))


def rules(f: Fields, cfg) -> dict:
    scale = math.sqrt(cfg.d_head)
    head = _head(f)
    out = {
        "embed.weight": Rule(("shared.weight",)),
        "enc_position.bias.weight": Rule(("encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight",)),
        "dec_position.bias.weight": Rule(("decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight",)),
        "enc_norm.weight": Rule(("encoder.final_layer_norm.weight",)),
        "dec_norm.weight": Rule(("decoder.final_layer_norm.weight",)),
        "head.weight": {
            "lm_head": Rule(("lm_head.weight",)),
            "tied": Tie("embed.weight"),
            "scaled": Rule(("shared.weight",), lambda w: w * cfg.d_model**-0.5),
        }[head],
    }
    for i in range(cfg.n_encoder_layers):
        src, dst = f"encoder.block.{i}.layer.", f"encoder.blocks.{i}."
        _attention(out, src + "0.SelfAttention", dst + "attn", scale)
        out[dst + "res_attn.norm.weight"] = Rule((src + "0.layer_norm.weight",))
        _ffn(out, cfg, src + "1.", dst)
    for i in range(cfg.n_decoder_layers):
        src, dst = f"decoder.block.{i}.layer.", f"decoder.blocks.{i}."
        _attention(out, src + "0.SelfAttention", dst + "attn", scale)
        out[dst + "res_attn.norm.weight"] = Rule((src + "0.layer_norm.weight",))
        _attention(out, src + "1.EncDecAttention", dst + "cross", scale)
        out[dst + "res_cross.norm.weight"] = Rule((src + "1.layer_norm.weight",))
        _ffn(out, cfg, src + "2.", dst)
    return out
