"""GPT-2 (Radford et al. 2019): ``GPT2LMHeadModel`` / ``GPT2Model`` checkpoints.

Catalogue choices: decoder-only, causal, full attention, ``learned`` positions (``n_positions``),
pre-LN with ``layernorm`` (``layer_norm_epsilon``) and a final norm, ``gelu`` FFN of width ``n_inner``
(None: 4 d) with the tanh approximation for ``gelu_new``, biases on every projection
(``attn_bias="all"``), LM head tied to the token embedding. GPT-2's ``Conv1D`` stores weights as
``(in, out)``: they are transposed, and ``c_attn`` is split into the q, k, v projections. Without
``scale_attn_weights`` GPT-2 does not divide scores by sqrt(d_h); the catalogue does, so q is
multiplied by sqrt(d_h) instead (the same scores).
"""

from __future__ import annotations

import math
import re

from .fields import Fields
from .mapping import Rule, Tie

MODEL_TYPES = ("gpt2",)
ACTIVATIONS = {
    "gelu_new": ("gelu", "tanh"),
    "gelu_pytorch_tanh": ("gelu", "tanh"),
    "gelu_fast": ("gelu", "tanh"),
    "gelu": ("gelu", "none"),
    "relu": ("relu", "none"),
    "silu": ("swish", "none"),
    "swish": ("swish", "none"),
}
# catalogue field -> config.json key
NAMES = {
    "d_model": "n_embd",
    "n_heads": "n_head",
    "n_layers": "n_layer",
    "max_len": "n_positions",
    "d_ff": "n_inner",
    "vocab_size": "vocab_size",
    "norm_eps": "layer_norm_epsilon",
}
SIZES = {}  # every size GPT-2 reads has a catalogue field (models.hf.sizes)
BUFFERS = re.compile(r"^h\.\d+\.attn\.(bias|masked_bias)$")  # causal-mask buffers of old checkpoints


def config(f: Fields) -> tuple:
    d, heads = f.integer("n_embd", lo=1), f.integer("n_head", lo=1)
    act = f.text("activation_function", "gelu_new")
    if act not in ACTIVATIONS:
        f.refuse("activation_function", act, f"hidden_act {act!r} is not supported; one of {sorted(ACTIVATIONS)}")
    if f.flag("scale_attn_by_inverse_layer_idx", False):
        f.refuse("scale_attn_by_inverse_layer_idx", True, "false (per-layer score scaling is not in the catalogue)")
    if f.flag("add_cross_attention", False):
        f.refuse("add_cross_attention", True, "false (a GPT-2 decoder with cross-attention is not supported)")
    ffn, approx = ACTIVATIONS[act]
    notes = ["LM head tied to the token embedding" if _tied(f) else "separate LM head (lm_head.weight)"]
    if not f.flag("scale_attn_weights", True):
        notes.append("scores not divided by sqrt(d_h) (scale_attn_weights=false): q multiplied by sqrt(d_h)")
    return dict(
        architecture="decoder_only",
        causal=True,
        attention="full",
        position="learned",
        norm_placement="pre",
        norm="layernorm",
        ffn=ffn,
        gelu_approx=approx,
        attn_bias="all",
        vocab_size=f.integer("vocab_size", lo=1),
        max_len=f.integer("n_positions", 1024, lo=1),
        n_layers=f.integer("n_layer", lo=1),
        d_model=d,
        n_heads=heads,
        d_ff=f.integer("n_inner", 4 * d, lo=1),
        norm_eps=f.number("layer_norm_epsilon", 1e-5),
    ), notes


def _tied(f: Fields) -> bool:
    return f.flag("tie_word_embeddings", True)


def canonical(f: Fields, name: str):
    name = name.removeprefix("transformer.")
    if BUFFERS.match(name) or (name == "lm_head.weight" and _tied(f)):
        return None  # the tied head is the embedding; HF ties it the same way
    return name


def rules(f: Fields, cfg) -> dict:
    d = cfg.d_model
    s = 1.0 if f.flag("scale_attn_weights", True) else math.sqrt(cfg.d_head)
    out = {
        "embed.weight": Rule(("wte.weight",)),
        "position.table.weight": Rule(("wpe.weight",)),
        "final_norm.weight": Rule(("ln_f.weight",)),
        "final_norm.bias": Rule(("ln_f.bias",)),
        "head.weight": Tie("embed.weight") if _tied(f) else Rule(("lm_head.weight",)),
    }
    for i in range(cfg.n_layers):
        src, dst = f"h.{i}.", f"stack.blocks.{i}."
        for j, proj in enumerate(("q_proj", "k_proj", "v_proj")):
            scale = s if proj == "q_proj" else 1.0
            out[dst + f"attn.{proj}.weight"] = Rule(
                (src + "attn.c_attn.weight",), lambda w, j=j, c=scale: w[:, j * d : (j + 1) * d].t() * c
            )
            out[dst + f"attn.{proj}.bias"] = Rule(
                (src + "attn.c_attn.bias",), lambda b, j=j, c=scale: b[j * d : (j + 1) * d] * c
            )
        out[dst + "attn.out_proj.weight"] = Rule((src + "attn.c_proj.weight",), lambda w: w.t())
        out[dst + "attn.out_proj.bias"] = Rule((src + "attn.c_proj.bias",))
        out[dst + "ffn.w1.weight"] = Rule((src + "mlp.c_fc.weight",), lambda w: w.t())
        out[dst + "ffn.w1.bias"] = Rule((src + "mlp.c_fc.bias",))
        out[dst + "ffn.w2.weight"] = Rule((src + "mlp.c_proj.weight",), lambda w: w.t())
        out[dst + "ffn.w2.bias"] = Rule((src + "mlp.c_proj.bias",))
        for norm, ln in (("res_attn", "ln_1"), ("res_ffn", "ln_2")):
            out[dst + f"{norm}.norm.weight"] = Rule((src + f"{ln}.weight",))
            out[dst + f"{norm}.norm.bias"] = Rule((src + f"{ln}.bias",))
    return out
